/**
 * The sidebar's and the job view's polling, on JupyterLab's own `Poll` (@lumino/polling).
 *
 *     const poller = new Poller({ task: () => read(), interval: 2000, maxBackoff: 30000 });
 *     poller.resume(); // runs at once, then 2 s after each run ends
 *
 * `Poll` owns the timer and the ticks. What this adds to it: two runs never overlap (a
 * refresh asked during a run runs once more right after it, and its promise settles when that
 * run is done), the wait after a failure doubles from the interval up to `maxBackoff` exactly
 * (`Poll`'s own backoff is randomised), a success resets it, and a refresh while paused runs
 * once without resuming. The browser tab's visibility is the feed's to decide, so the `Poll`
 * never stands by on its own.
 */
import { PromiseDelegate } from '@lumino/coreutils';
import { Poll } from '@lumino/polling';

/** How a Poller runs. */
export interface PollerOptions {
  /** The work of one tick; a rejection counts as a failure. */
  task: () => Promise<void>;
  /** Milliseconds between the end of one tick and the start of the next. */
  interval: number;
  /** The longest wait after repeated failures (the wait doubles per failure). */
  maxBackoff: number;
  /** The `Poll`'s name (for debugging). */
  name?: string;
}

/**
 * Runs a task every `interval` ms, counted from the end of the previous run so two runs
 * never overlap. After a failure the wait doubles, up to `maxBackoff`; a success resets it.
 * Starts paused: call `resume()`.
 */
export class Poller {
  private _poll: Poll;
  private _task: () => Promise<void>;
  private _interval: number;
  private _maxBackoff: number;
  private _running: Promise<void> | null = null;
  /** Settles when the run after the one in flight is done (a refresh asked for it). */
  private _again: PromiseDelegate<void> | null = null;
  private _paused = true;
  private _failures = 0;

  constructor(options: PollerOptions) {
    this._task = options.task;
    this._interval = options.interval;
    this._maxBackoff = options.maxBackoff;
    this._poll = new Poll({
      auto: false,
      factory: () => this._tick(),
      frequency: { interval: options.interval, backoff: false, max: Poll.MAX_INTERVAL },
      name: options.name ?? 'aviflow',
      standby: 'never'
    });
  }

  /** Consecutive failures so far. */
  get failures(): number {
    return this._failures;
  }

  get interval(): number {
    return this._interval;
  }

  get paused(): boolean {
    return this._paused;
  }

  /** Whether a run is in flight. */
  get busy(): boolean {
    return this._running !== null;
  }

  /** The wait before the next run, given the failures so far. */
  get delay(): number {
    if (this._failures === 0) {
      return this._interval;
    }
    const backoff = this._interval * 2 ** this._failures;
    return Math.min(Math.max(this._maxBackoff, this._interval), backoff);
  }

  /** Change the interval; a scheduled run is rescheduled with the new delay. */
  setInterval(ms: number): void {
    this._interval = ms;
    if (!this._paused && !this._running && !this.isDisposed) {
      this._scheduleNext();
    }
  }

  /** Run now (unless paused) and then every interval. */
  resume(): void {
    if (this.isDisposed || !this._paused) {
      return;
    }
    this._paused = false;
    void this.refresh();
  }

  /** Stop scheduling runs; one in flight finishes. */
  pause(): void {
    this._paused = true;
    if (!this.isDisposed) {
      void this._poll.stop();
    }
  }

  /**
   * Run now, paused or not. When a run is in flight, run once more right after it; the
   * promise settles when that run is done.
   */
  refresh(): Promise<void> {
    if (this.isDisposed) {
      return Promise.resolve();
    }
    if (this._running) {
      return this._onceMore(this._running);
    }
    return this._now();
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._paused = true;
    this._poll.dispose();
  }

  get isDisposed(): boolean {
    return this._poll.isDisposed;
  }

  /** The Poll's factory: a run when its timer fires, then the wait before the next. */
  private async _tick(): Promise<void> {
    while (this._running) {
      await this._running;
    }
    await this._run();
    this._setWait(this.delay);
  }

  /** A run outside the Poll's timer (a refresh, a resume); the timer waits for its end. */
  private async _now(): Promise<void> {
    if (!this._paused) {
      void this._poll.schedule({ interval: Poll.NEVER, phase: 'standby' });
    }
    await this._run();
    if (!this._paused && !this.isDisposed && this._again === null) {
      this._scheduleNext();
    }
  }

  /** One more run right after the one in flight (one, however often asked meanwhile). */
  private _onceMore(running: Promise<void>): Promise<void> {
    if (this._again === null) {
      const again = new PromiseDelegate<void>();
      this._again = again;
      void running.then(async () => {
        while (this._running) {
          await this._running;
        }
        this._again = null;
        if (!this.isDisposed) {
          await this._now();
        }
        again.resolve();
      });
    }
    return this._again.promise;
  }

  /** The Poll's next tick after the current delay. */
  private _scheduleNext(): void {
    this._setWait(this.delay);
    void this._poll.schedule({ interval: this.delay, phase: 'standby' });
  }

  private _run(): Promise<void> {
    const run = this._task().then(
      () => {
        this._failures = 0;
      },
      () => {
        this._failures += 1;
      }
    );
    this._running = run.then(() => {
      this._running = null;
    });
    return this._running;
  }

  /** The wait the Poll schedules after the current tick. */
  private _setWait(ms: number): void {
    if (!this.isDisposed) {
      this._poll.frequency = { interval: ms, backoff: false, max: Poll.MAX_INTERVAL };
    }
  }
}
