/**
 * The one live source of the caller's jobs and queues, shared by the sidebar, the status
 * bar and the commands. It polls the incremental jobs feed every 2 s while the sidebar is
 * visible and every 15 s while only the status bar shows (or not at all without one),
 * the queues every 5 s while the sidebar is visible, and nothing while the browser tab is
 * hidden.
 */
import { IDisposable } from '@lumino/disposable';
import { ISignal, Signal } from '@lumino/signaling';

import { AviflowError } from './errors';
import { JobsModel } from './model';
import { Poller } from './poller';
import type { AviflowClient, QueueQuota } from './types';

/** Poll intervals in milliseconds. */
export interface FeedIntervals {
  jobsVisible: number;
  jobsBackground: number;
  queues: number;
  maxBackoff: number;
}

export const DEFAULT_INTERVALS: FeedIntervals = {
  jobsVisible: 2000,
  jobsBackground: 15000,
  queues: 5000,
  maxBackoff: 30000
};

export interface FeedOptions {
  intervals?: Partial<FeedIntervals>;
  /** Local time in epoch seconds (tests pass a fixed clock). */
  now?: () => number;
}

export class AviflowFeed implements IDisposable {
  readonly model = new JobsModel();
  private _queues: QueueQuota[] = [];
  private _queuesLoaded = false;
  private _jobsError: AviflowError | null = null;
  private _queuesError: AviflowError | null = null;
  private _jobsPoller: Poller;
  private _queuesPoller: Poller;
  private _intervals: FeedIntervals;
  private _now: () => number;
  private _sidebarVisible = false;
  private _background = false;
  private _documentHidden = false;
  private _changed = new Signal<this, void>(this);
  private _disposed = false;

  constructor(
    readonly client: AviflowClient,
    options: FeedOptions = {}
  ) {
    this._intervals = { ...DEFAULT_INTERVALS, ...options.intervals };
    this._now = options.now ?? (() => Date.now() / 1000);
    this._jobsPoller = new Poller({
      task: () => this._readJobs(),
      interval: this._intervals.jobsBackground,
      maxBackoff: this._intervals.maxBackoff,
      name: 'aviflow:jobs'
    });
    this._queuesPoller = new Poller({
      task: () => this._readQueues(),
      interval: this._intervals.queues,
      maxBackoff: this._intervals.maxBackoff,
      name: 'aviflow:queues'
    });
  }

  /** Emitted after every read of jobs or queues, whether it worked or not. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get queues(): readonly QueueQuota[] {
    return this._queues;
  }

  get queuesLoaded(): boolean {
    return this._queuesLoaded;
  }

  /** The error of the last read (jobs first), null when the last reads worked. */
  get error(): AviflowError | null {
    return this._jobsError ?? this._queuesError;
  }

  /** Local time in epoch seconds. */
  now(): number {
    return this._now();
  }

  get jobsPoller(): Poller {
    return this._jobsPoller;
  }

  get queuesPoller(): Poller {
    return this._queuesPoller;
  }

  /** Whether the sidebar shows: fast polls of jobs and polls of queues. */
  setSidebarVisible(visible: boolean): void {
    this._sidebarVisible = visible;
    this._update(visible);
  }

  /** Whether to keep a slow poll of jobs while the sidebar is hidden (the status bar). */
  setBackgroundPolling(enabled: boolean): void {
    this._background = enabled;
    this._update(false);
  }

  /** Whether the browser tab is hidden: no polls at all. */
  setDocumentHidden(hidden: boolean): void {
    const wasHidden = this._documentHidden;
    this._documentHidden = hidden;
    this._update(wasHidden && !hidden);
  }

  /** Read jobs (and queues while the sidebar shows) now. */
  async refresh(): Promise<void> {
    const reads = [this._jobsPoller.refresh()];
    if (this._sidebarVisible) {
      reads.push(this._queuesPoller.refresh());
    }
    await Promise.all(reads);
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    this._jobsPoller.dispose();
    this._queuesPoller.dispose();
    Signal.clearData(this);
  }

  /** Pause or resume the pollers for the current visibility; `now` reads at once. */
  private _update(now: boolean): void {
    const active = !this._documentHidden;
    const jobsActive = active && (this._sidebarVisible || this._background);
    this._jobsPoller.setInterval(
      this._sidebarVisible ? this._intervals.jobsVisible : this._intervals.jobsBackground
    );
    this._setActive(this._jobsPoller, jobsActive, now);
    this._setActive(this._queuesPoller, active && this._sidebarVisible, now);
  }

  private _setActive(poller: Poller, active: boolean, now: boolean): void {
    if (!active) {
      poller.pause();
    } else if (poller.paused) {
      poller.resume();
    } else if (now) {
      void poller.refresh();
    }
  }

  private async _readJobs(): Promise<void> {
    const since = this.model.cursor;
    try {
      const answer = await this.client.jobs(since);
      this.model.apply(answer, since, this._now());
      this._jobsError = null;
    } catch (error) {
      this._jobsError = AviflowError.from(error);
      throw error;
    } finally {
      if (!this._disposed) {
        this._changed.emit();
      }
    }
  }

  private async _readQueues(): Promise<void> {
    try {
      const answer = await this.client.queues();
      this._queues = answer.queues ?? [];
      this._queuesLoaded = true;
      this._queuesError = null;
    } catch (error) {
      this._queuesError = AviflowError.from(error);
      throw error;
    } finally {
      if (!this._disposed) {
        this._changed.emit();
      }
    }
  }
}
