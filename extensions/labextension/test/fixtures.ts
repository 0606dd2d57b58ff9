/**
 * Test fixtures: `job()` builds a JobSummary, `queue()` a QueueQuota, `FakeClient` is an
 * AviflowClient whose answers the test queues and whose calls it records.
 */
import { AviflowError } from '../src/errors';
import type {
  AviflowClient,
  CancelAnswer,
  ExampleAnswer,
  JobDetailAnswer,
  JobsAnswer,
  JobSummary,
  LogAnswer,
  LogRead,
  QueueQuota,
  QueuesAnswer
} from '../src/types';

export function job(overrides: Partial<JobSummary> & { id: string }): JobSummary {
  return {
    name: overrides.id,
    user: 'alice',
    team: 'vision',
    queue: 'vision-q',
    nodes: 1,
    gpusPerNode: 8,
    gpus: 8,
    state: 'RUNNING',
    attempt: 1,
    message: '',
    queuePosition: null,
    submitted: 1000,
    updated: 1000,
    finished: null,
    gpuSeconds: 0,
    origin: { kind: 'notebook-cell' },
    failure: undefined,
    ...overrides
  };
}

export function queue(overrides: Partial<QueueQuota> = {}): QueueQuota {
  return {
    queue: 'vision-q',
    team: 'vision',
    gpuQuota: 4,
    gpusInUse: 0,
    pendingCount: 0,
    borrowed: 0,
    lendable: 0,
    pending: [],
    ...overrides
  };
}

export function answer(jobs: JobSummary[], next: number, now = 2000, removed: string[] = []): JobsAnswer {
  return { jobs, removed, next, now, backend: 'local', user: 'alice' };
}

type Reply<T> = T | AviflowError;

/** An AviflowClient fed by the test: push answers (or errors) per method; calls are recorded. */
export class FakeClient implements AviflowClient {
  calls: string[] = [];
  jobsReplies: Reply<JobsAnswer>[] = [];
  queuesReplies: Reply<QueuesAnswer>[] = [];
  jobReplies: Reply<JobDetailAnswer>[] = [];
  logReplies: Reply<LogAnswer>[] = [];
  cancelReplies: Reply<CancelAnswer>[] = [];

  private static _next<T>(replies: Reply<T>[], what: string): Promise<T> {
    const reply = replies.length > 1 ? replies.shift()! : replies[0];
    if (reply === undefined) {
      return Promise.reject(new Error(`no reply queued for ${what}`));
    }
    return reply instanceof AviflowError ? Promise.reject(reply) : Promise.resolve(reply);
  }

  jobs(since: number): Promise<JobsAnswer> {
    this.calls.push(`jobs?since=${since}`);
    return FakeClient._next(this.jobsReplies, 'jobs');
  }

  queues(): Promise<QueuesAnswer> {
    this.calls.push('queues');
    return FakeClient._next(this.queuesReplies, 'queues');
  }

  job(id: string): Promise<JobDetailAnswer> {
    this.calls.push(`job ${id}`);
    return FakeClient._next(this.jobReplies, 'job');
  }

  logs(id: string, rank: number, read: LogRead): Promise<LogAnswer> {
    const query = 'tail' in read ? `tail=${read.tail}` : `offset=${read.offset}`;
    this.calls.push(`logs ${id} ${rank} ${query}`);
    return FakeClient._next(this.logReplies, 'logs');
  }

  cancel(id: string): Promise<CancelAnswer> {
    this.calls.push(`cancel ${id}`);
    return FakeClient._next(this.cancelReplies, 'cancel');
  }

  example(): Promise<ExampleAnswer> {
    this.calls.push('example');
    return Promise.resolve({ name: 'aviflow-example.ipynb', notebook: {} });
  }
}

/** Let pending promise callbacks run. */
export async function flush(times = 10): Promise<void> {
  for (let i = 0; i < times; i++) {
    await Promise.resolve();
  }
}
