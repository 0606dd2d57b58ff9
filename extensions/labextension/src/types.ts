/**
 * The wire shapes of the Aviflow server extension (`aviflow_jupyter`), as documented in
 * extensions/README.md ("HTTP contract of the server extension"). The records' shapes are
 * generated from their Python definitions (records.ts, `make generate`); this file names
 * them as the extension uses them and declares the answers built around them. Nothing
 * else in the extension re-declares them.
 */
import type {
  CheckpointRef,
  ExpectedStart,
  FailureInfo,
  JobState,
  JobSummary,
  LogChunk,
  PendingJob,
  QueueQuota,
  WaitNumbers
} from './records';

export type {
  ExpectedStart,
  JobState,
  JobSummary,
  QueueQuota,
  WaitNumbers
} from './records';

/** The states after which a job never changes again. */
export const FINISHED_STATES: ReadonlySet<string> = new Set([
  'SUCCEEDED',
  'FAILED',
  'CANCELLED'
]);

/** The first failing rank of a failed job (aviflow.records.FailureInfo). */
export type JobFailure = FailureInfo;

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
export type QueuePending = PendingJob;

/** `GET aviflow/queues`. */
export interface QueuesAnswer {
  queues: QueueQuota[];
}

/** A checkpoint of a job. */
export type CheckpointInfo = CheckpointRef;

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
export type LogAnswer = LogChunk;

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
