/**
 * The pure part of the Aviflow sidebar's jobs: no DOM, no requests, no timers (polling is
 * src/poller.ts, the queue bars src/queuebar.ts). Unit-tested in test/model.spec.ts.
 *
 *     const model = new JobsModel();
 *     model.apply(await client.jobs(model.cursor), model.cursor, Date.now() / 1000);
 *     model.statusText(); // "2 running · 1 queued"
 */
import { FINISHED_STATES, JobFailure, JobSummary, JobsAnswer } from './types';
import { startWords, waitWords } from './waiting';

// ---------------------------------------------------------------------------
// Formatting
// ---------------------------------------------------------------------------

const pad2 = (n: number): string => String(n).padStart(2, '0');

/** A duration in seconds: "42s", "3m 05s", "2h 03m", "1d 4h". */
export function formatElapsed(seconds: number): string {
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) {
    return `${s}s`;
  }
  if (s < 3600) {
    return `${Math.floor(s / 60)}m ${pad2(s % 60)}s`;
  }
  if (s < 86400) {
    return `${Math.floor(s / 3600)}h ${pad2(Math.floor((s % 3600) / 60))}m`;
  }
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}

/** GPU time: "0.12 GPU-h" (2 decimals), "<0.01 GPU-h" for a tiny nonzero amount. */
export function formatGpuHours(gpuSeconds: number): string {
  const hours = Math.max(0, gpuSeconds) / 3600;
  if (hours > 0 && hours < 0.005) {
    return '<0.01 GPU-h';
  }
  return `${hours.toFixed(2)} GPU-h`;
}

/** A job's size: "2 × 8 GPUs", "1 × 1 GPU"; "1 node · CPU" without GPUs. */
export function formatSize(nodes: number, gpusPerNode: number): string {
  if (gpusPerNode <= 0) {
    return `${nodes} ${nodes === 1 ? 'node' : 'nodes'} · CPU`;
  }
  return `${nodes} × ${gpusPerNode} ${gpusPerNode === 1 ? 'GPU' : 'GPUs'}`;
}

/** A queued job's place: "#2 in queue"; "" when it has none. */
export function formatQueuePosition(position: number | null | undefined): string {
  return position === null || position === undefined ? '' : `#${position} in queue`;
}

/** The first failing rank of a failed job: "rank 3 failed: ValueError: bad shape". */
export function formatFailure(failure: JobFailure | null | undefined): string {
  if (!failure) {
    return '';
  }
  const who = failure.rank === null || failure.rank === undefined ? 'a rank' : `rank ${failure.rank}`;
  const exception = failure.exception ?? '';
  const message = failure.message ?? '';
  let what: string;
  if (exception && message && !message.startsWith(exception)) {
    what = `${exception}: ${message}`;
  } else {
    what = message || exception;
  }
  if (what) {
    return `${who} failed: ${what}`;
  }
  if (failure.exitCode !== null && failure.exitCode !== undefined) {
    return `${who} failed (exit code ${failure.exitCode})`;
  }
  return `${who} failed`;
}

/** The lower-case word a state badge shows: "running", "queued", ... */
export function stateText(state: string): string {
  return state.toLowerCase();
}

/** Whether a job in this state never changes again. */
export function isFinished(state: string): boolean {
  return FINISHED_STATES.has(state);
}

// ---------------------------------------------------------------------------
// Jobs
// ---------------------------------------------------------------------------

/** What a sidebar row shows of one job; rows are re-rendered field by field on change. */
export interface JobRowView {
  id: string;
  name: string;
  state: string;
  stateText: string;
  /** "#2 in queue" for a queued job, else "". */
  position: string;
  /** When a queued job is expected to start ("starts in about 5-12 min"), else "". */
  start: string;
  /** Why a queued or starting job waits, else "". */
  reason: string;
  /** A queued job's queue numbers ("queue vision: quota 8 GPUs, ..."), else "". */
  wait: string;
  elapsed: string;
  gpuHours: string;
  size: string;
  /** The first failing rank of a failed job, else "". */
  failure: string;
  /** The row's tooltip. */
  title: string;
}

/** The row view of a job at server time `now` (epoch seconds). */
export function jobRowView(job: JobSummary, now: number): JobRowView {
  const queued = job.state === 'QUEUED';
  const waiting = queued || job.state === 'STARTING';
  const end = job.finished ?? now;
  const title = [
    `${job.name} (${job.id})`,
    job.queue ? `queue ${job.queue}` : '',
    job.attempt > 1 ? `attempt ${job.attempt}` : ''
  ]
    .filter(Boolean)
    .join(' · ');
  return {
    id: job.id,
    name: job.name,
    state: job.state,
    stateText: stateText(job.state),
    position: queued ? formatQueuePosition(job.queuePosition) : '',
    start: queued ? startWords(job.expectedStart, now) : '',
    reason: waiting ? job.message ?? '' : '',
    wait: queued ? waitWords(job.wait) : '',
    elapsed: formatElapsed(end - job.submitted),
    gpuHours: formatGpuHours(job.gpuSeconds),
    size: formatSize(job.nodes, job.gpusPerNode),
    failure: job.state === 'FAILED' ? formatFailure(job.failure) : '',
    title
  };
}

/** How many of the caller's jobs run (RUNNING or STARTING) and wait (QUEUED). */
export interface JobCounts {
  running: number;
  queued: number;
}

/** The status-bar text for counts: "2 running · 1 queued", "no jobs running". */
export function statusText(counts: JobCounts): string {
  const parts: string[] = [];
  if (counts.running > 0) {
    parts.push(`${counts.running} running`);
  }
  if (counts.queued > 0) {
    parts.push(`${counts.queued} queued`);
  }
  return parts.length ? parts.join(' · ') : 'no jobs running';
}

/** Newest first: by `submitted` descending, then by id descending. */
export function compareJobs(a: JobSummary, b: JobSummary): number {
  if (a.submitted !== b.submitted) {
    return b.submitted - a.submitted;
  }
  return a.id < b.id ? 1 : a.id > b.id ? -1 : 0;
}

/** What one `apply` changed. */
export interface JobsChange {
  /** The answer replaced the whole list (first read, or the server restarted). */
  reset: boolean;
  /** Ids of jobs added or replaced. */
  updated: string[];
  /** Ids of jobs dropped. */
  removed: string[];
}

/**
 * The caller's jobs, kept from incremental answers of `GET aviflow/jobs?since=`.
 *
 * `apply(answer, since, localNow)` merges by id, drops `removed`, and starts over when the
 * answer is a full list (`since` 0, `reset` set, or `next` below the `since` sent: the
 * server restarted). It keeps `next` as the cursor and the server's clock offset from `now`.
 */
export class JobsModel {
  private _jobs = new Map<string, JobSummary>();
  private _sorted: JobSummary[] = [];
  private _cursor = 0;
  private _offset = 0;
  private _loaded = false;
  private _backend = '';
  private _user = '';

  /** The cursor to send as `since` with the next read. */
  get cursor(): number {
    return this._cursor;
  }

  /** Whether an answer was applied since the last reset. */
  get loaded(): boolean {
    return this._loaded;
  }

  /** The backend the server reads jobs from ("local", "kubernetes", ...), "" before a read. */
  get backend(): string {
    return this._backend;
  }

  /** The caller's user name as the server knows it, "" before a read. */
  get user(): string {
    return this._user;
  }

  /** Server time minus local time, in seconds (from the last answer's `now`). */
  get clockOffset(): number {
    return this._offset;
  }

  /** The jobs, newest first. */
  get jobs(): readonly JobSummary[] {
    return this._sorted;
  }

  /** A job by id. */
  get(id: string): JobSummary | undefined {
    return this._jobs.get(id);
  }

  /** The server's clock for a local time (both epoch seconds). */
  serverNow(localNow: number): number {
    return localNow + this._offset;
  }

  /** Apply an answer to a read sent with `since`, received at `localNow` (epoch seconds). */
  apply(answer: JobsAnswer, since: number, localNow: number): JobsChange {
    const reset = since === 0 || answer.next < since || answer.reset === true;
    const removed: string[] = [];
    if (reset) {
      for (const id of this._jobs.keys()) {
        if (!answer.jobs.some(job => job.id === id)) {
          removed.push(id);
        }
      }
      this._jobs.clear();
    }
    const updated: string[] = [];
    for (const job of answer.jobs) {
      this._jobs.set(job.id, job);
      updated.push(job.id);
    }
    for (const id of answer.removed ?? []) {
      if (this._jobs.delete(id)) {
        removed.push(id);
      }
    }
    this._sorted = [...this._jobs.values()].sort(compareJobs);
    this._cursor = answer.next;
    this._offset = answer.now - localNow;
    this._backend = answer.backend ?? this._backend;
    this._user = answer.user ?? this._user;
    this._loaded = true;
    return { reset, updated, removed };
  }

  /** Forget everything; the next read starts from cursor 0. */
  clear(): void {
    this._jobs.clear();
    this._sorted = [];
    this._cursor = 0;
    this._loaded = false;
  }

  /** How many jobs run (RUNNING or STARTING) and wait (QUEUED). */
  counts(): JobCounts {
    let running = 0;
    let queued = 0;
    for (const job of this._sorted) {
      if (job.state === 'RUNNING' || job.state === 'STARTING') {
        running += 1;
      } else if (job.state === 'QUEUED') {
        queued += 1;
      }
    }
    return { running, queued };
  }

  /** The status-bar text: "2 running · 1 queued", "no jobs running". */
  statusText(): string {
    return statusText(this.counts());
  }

  /** The row views of all jobs, newest first, at local time `localNow` (epoch seconds). */
  rows(localNow: number): JobRowView[] {
    const now = this.serverNow(localNow);
    return this._sorted.map(job => jobRowView(job, now));
  }
}
