/**
 * The wire shapes of the Aviflow server extension (`aviflow_jupyter`), as documented in
 * extensions/README.md ("HTTP contract of the server extension"). One interface per
 * record; nothing else in the extension re-declares them.
 */

/** A job's lifecycle state. */
export type JobState =
  | 'QUEUED'
  | 'STARTING'
  | 'RUNNING'
  | 'SUCCEEDED'
  | 'FAILED'
  | 'CANCELLED';

/** The states after which a job never changes again. */
export const FINISHED_STATES: ReadonlySet<string> = new Set([
  'SUCCEEDED',
  'FAILED',
  'CANCELLED'
]);

/** The first failing rank of a failed job. */
export interface JobFailure {
  rank: number | null;
  node?: string | null;
  attempt?: number | null;
  exception?: string | null;
  message?: string | null;
  exitCode?: number | null;
}

/**
 * When a queued job is expected to start (aviflow/estimate.py): between `low` and `high`
 * (epoch seconds; `high` null: no later bound), `never` (the limit that forbids it), `now`
 * (it fits at once), `window` (the range in UTC, one word). Shown by waiting.ts.
 */
export interface ExpectedStart {
  low: number | null;
  high: number | null;
  window?: string;
  never?: string;
  now?: boolean;
  assumed?: string[];
}

/** The numbers behind a queued job's wait, its own queue's (aviflow.estimate.WaitNumbers). */
export interface WaitNumbers {
  queue: string;
  quota: number;
  holds: number;
  borrowed: number;
  lendable: number;
  ahead: number;
  aheadGpus: number;
}

/** One job in `GET aviflow/jobs`. Times are epoch seconds. */
export interface JobSummary {
  id: string;
  name: string;
  user: string;
  team: string | null;
  queue: string | null;
  nodes: number;
  gpusPerNode: number;
  gpus: number;
  state: JobState;
  attempt: number;
  message: string | null;
  queuePosition: number | null;
  submitted: number;
  updated: number;
  finished: number | null;
  gpuSeconds: number;
  origin?: unknown;
  failure?: JobFailure | null;
  /** While QUEUED (absent on servers before it, or without an estimate). */
  expectedStart?: ExpectedStart | null;
  wait?: WaitNumbers | null;
}

/** `GET aviflow/jobs?since=<cursor>`: the changes after `since`. */
export interface JobsAnswer {
  jobs: JobSummary[];
  removed: string[];
  next: number;
  now: number;
  /** Set by the server when this answer is the full list (same as `next` < `since`). */
  reset?: boolean;
  backend?: string;
  user?: string;
}

/** A pending job in a queue. */
export interface QueuePending {
  id: string;
  user: string;
  position: number;
  gpus: number;
}

/** One of the caller's team queues. `gpuQuota` null means unlimited. */
export interface QueueQuota {
  queue: string;
  team: string | null;
  gpuQuota: number | null;
  gpusInUse: number;
  pendingCount: number;
  borrowed: number;
  /** GPUs idle in the queue's cohort that it could borrow now (absent from older servers: 0). */
  lendable?: number;
  pending: QueuePending[];
}

/** `GET aviflow/queues`. */
export interface QueuesAnswer {
  queues: QueueQuota[];
}

/** A checkpoint of a job. */
export interface CheckpointInfo {
  job: string;
  step: number;
  time: number;
  attempt: number;
}

/** The job part of `GET aviflow/jobs/<id>`. */
export interface JobDetail {
  id: string;
  name: string;
  state: JobState;
  attempt: number;
  message: string | null;
  queuePosition: number | null;
  nodes: number;
  gpusPerNode: number;
  submitted: number;
  finished: number | null;
  now: number;
  elapsed: number;
  gpuHours: number;
  /** Allocated GPU-hours x mean utilization (GPU, or CPU on a pool without GPUs: usedKind). */
  usedHours?: number | null;
  usedKind?: 'gpu' | 'cpu' | null;
  failure: JobFailure | null;
  logRanks: number[];
  checkpoints: CheckpointInfo[];
  metricRows: number;
  metrics: Record<string, [number, number][]>;
  /**
   * The server has not read everything the job logged yet (it reads a few pages a request):
   * read the job again, also after it finished, until this is false.
   */
  catchingUp?: boolean;
  /** The attempt's latest use (the driver's USAGE event): GPU or CPU utilization, memory. */
  usage?: JobUsage | null;
  /** The attempt's idle flag (the IDLE event's message), if it was flagged. */
  idle?: string | null;
  /** While QUEUED: its expected start and the numbers behind its wait. */
  expectedStart?: ExpectedStart | null;
  wait?: WaitNumbers | null;
}

/** What a running attempt uses of what it holds (see aviflow.usage). */
export interface JobUsage {
  kind: 'gpu' | 'cpu';
  util: number;
  ranks: number;
  mem?: number;
  memTotal?: number;
  power?: number;
}

/** The notebook panel's own rendering of each section of a job (escaped, inline SVG). */
export interface JobDetailHtml {
  header?: string;
  failure?: string;
  charts?: string;
  ranks?: string;
  checkpoints?: string;
}

/** `GET aviflow/jobs/<id>`. */
export interface JobDetailAnswer {
  job: JobDetail;
  html: JobDetailHtml;
}

/**
 * `GET aviflow/jobs/<id>/logs/<rank>?tail=<lines>` or `?offset=<byte>`: bytes
 * `[offset, next)` of the log (at most 1 MiB), whose size was `size`; read on from `next`
 * while it is below `size`.
 */
export interface LogAnswer {
  rank: number;
  text: string;
  offset: number;
  next: number;
  size: number;
}

/** `POST aviflow/jobs/<id>/cancel`. */
export interface CancelAnswer {
  id: string;
  cancelled: boolean;
  state: JobState;
}

/** `GET aviflow/example`. */
export interface ExampleAnswer {
  name: string;
  notebook: Record<string, unknown>;
}

/** How to read a rank's log: the last lines, or what follows a byte offset. */
export type LogRead = { tail: number } | { offset: number };

/**
 * Everything the extension reads or does on the server. `httpClient()` (api.ts) is the
 * real one; tests pass a fake.
 */
export interface AviflowClient {
  jobs(since: number): Promise<JobsAnswer>;
  queues(): Promise<QueuesAnswer>;
  job(id: string): Promise<JobDetailAnswer>;
  logs(id: string, rank: number, read: LogRead): Promise<LogAnswer>;
  cancel(id: string): Promise<CancelAnswer>;
  example(): Promise<ExampleAnswer>;
}
