import {
  formatElapsed,
  formatFailure,
  formatGpuHours,
  formatQueuePosition,
  formatSize,
  jobRowView,
  JobsModel,
  statusText
} from '../src/model';
import type { JobFailure } from '../src/types';
import { answer, job } from './fixtures';

/** A failure as a server that breaks the contract may send it (nulls where the record has none). */
const hostile = (raw: Record<string, unknown>): JobFailure => raw as unknown as JobFailure;

describe('formatting', () => {
  it.each([
    [0, '0s'],
    [42, '42s'],
    [59.9, '59s'],
    [60, '1m 00s'],
    [185, '3m 05s'],
    [3599, '59m 59s'],
    [3600, '1h 00m'],
    [7380, '2h 03m'],
    [86399, '23h 59m'],
    [86400, '1d 0h'],
    [100800, '1d 4h'],
    [-5, '0s']
  ])('elapsed %p -> %p', (seconds, text) => {
    expect(formatElapsed(seconds)).toBe(text);
  });

  it.each([
    [0, '0.00 GPU-h'],
    [1, '<0.01 GPU-h'],
    [17, '<0.01 GPU-h'],
    [18, '0.01 GPU-h'],
    [432, '0.12 GPU-h'],
    [3600, '1.00 GPU-h'],
    [16 * 3600 + 1800, '16.50 GPU-h']
  ])('GPU-hours of %p s -> %p', (seconds, text) => {
    expect(formatGpuHours(seconds)).toBe(text);
  });

  it('formats sizes', () => {
    expect(formatSize(2, 8)).toBe('2 × 8 GPUs');
    expect(formatSize(1, 1)).toBe('1 × 1 GPU');
    expect(formatSize(1, 0)).toBe('1 node · CPU');
    expect(formatSize(3, 0)).toBe('3 nodes · CPU');
  });

  it('formats queue positions', () => {
    expect(formatQueuePosition(2)).toBe('#2 in queue');
    expect(formatQueuePosition(null)).toBe('');
  });

  it('formats the first failing rank', () => {
    expect(formatFailure({ rank: 3, attempt: 1, exception: 'ValueError', message: 'bad shape' })).toBe(
      'rank 3 failed: ValueError: bad shape'
    );
    expect(formatFailure({ rank: 0, attempt: 1, exception: 'ValueError', message: 'ValueError: bad shape' })).toBe(
      'rank 0 failed: ValueError: bad shape'
    );
    expect(formatFailure(hostile({ rank: 1, exception: null, message: 'OOM killed' }))).toBe(
      'rank 1 failed: OOM killed'
    );
    expect(formatFailure({ rank: 2, attempt: 1, exitCode: 137 })).toBe('rank 2 failed (exit code 137)');
    expect(formatFailure(hostile({ rank: null }))).toBe('a rank failed');
    expect(formatFailure(null)).toBe('');
  });

  it('writes the status text', () => {
    expect(statusText({ running: 2, queued: 1 })).toBe('2 running · 1 queued');
    expect(statusText({ running: 1, queued: 0 })).toBe('1 running');
    expect(statusText({ running: 0, queued: 3 })).toBe('3 queued');
    expect(statusText({ running: 0, queued: 0 })).toBe('no jobs running');
  });
});

describe('jobRowView', () => {
  it('shows a queued job with its position and reason', () => {
    const view = jobRowView(
      job({
        id: 'j1',
        name: 'resnet',
        state: 'QUEUED',
        queuePosition: 2,
        message: 'waiting for admission: quota',
        nodes: 2,
        submitted: 1000
      }),
      1185
    );
    expect(view).toEqual({
      id: 'j1',
      name: 'resnet',
      state: 'QUEUED',
      stateText: 'queued',
      position: '#2 in queue',
      start: '',
      reason: 'waiting for admission: quota',
      wait: '',
      elapsed: '3m 05s',
      gpuHours: '0.00 GPU-h',
      size: '2 × 8 GPUs',
      failure: '',
      title: 'resnet (j1) · queue vision-q'
    });
  });

  it('stops the clock at `finished` and shows the failure of a failed job', () => {
    const view = jobRowView(
      job({
        id: 'j2',
        state: 'FAILED',
        attempt: 2,
        submitted: 1000,
        finished: 1042,
        gpuSeconds: 432,
        message: 'ignored when not waiting',
        failure: { rank: 3, attempt: 1, exception: 'ValueError', message: 'bad shape' }
      }),
      99999
    );
    expect(view.elapsed).toBe('42s');
    expect(view.gpuHours).toBe('0.12 GPU-h');
    expect(view.failure).toBe('rank 3 failed: ValueError: bad shape');
    expect(view.reason).toBe('');
    expect(view.position).toBe('');
    expect(view.title).toBe('j2 (j2) · queue vision-q · attempt 2');
  });
});

describe('JobsModel', () => {
  it('starts empty at cursor 0', () => {
    const model = new JobsModel();
    expect(model.cursor).toBe(0);
    expect(model.loaded).toBe(false);
    expect(model.jobs).toEqual([]);
    expect(model.statusText()).toBe('no jobs running');
  });

  it('merges increments by id, drops removed ones, keeps newest first', () => {
    const model = new JobsModel();
    const first = model.apply(
      answer(
        [
          job({ id: 'a', submitted: 100 }),
          job({ id: 'b', submitted: 300, state: 'QUEUED' }),
          job({ id: 'c', submitted: 200, state: 'SUCCEEDED' })
        ],
        5
      ),
      0,
      1990
    );
    expect(first).toEqual({ reset: true, updated: ['a', 'b', 'c'], removed: [] });
    expect(model.jobs.map(j => j.id)).toEqual(['b', 'c', 'a']);
    expect(model.cursor).toBe(5);

    const second = model.apply(
      answer([job({ id: 'a', submitted: 100, state: 'FAILED' }), job({ id: 'd', submitted: 300 })], 9, 2000, [
        'c'
      ]),
      5,
      1990
    );
    expect(second).toEqual({ reset: false, updated: ['a', 'd'], removed: ['c'] });
    // Same `submitted`: id descending.
    expect(model.jobs.map(j => j.id)).toEqual(['d', 'b', 'a']);
    expect(model.get('a')?.state).toBe('FAILED');
    expect(model.cursor).toBe(9);
    expect(model.counts()).toEqual({ running: 1, queued: 1 });
  });

  it('starts over when `next` is below the cursor sent (server restart)', () => {
    const model = new JobsModel();
    model.apply(answer([job({ id: 'a' }), job({ id: 'b' })], 40), 0, 2000);
    const change = model.apply(answer([job({ id: 'b', state: 'QUEUED' }), job({ id: 'z' })], 3), 40, 2000);
    expect(change).toEqual({ reset: true, updated: ['b', 'z'], removed: ['a'] });
    expect(model.jobs.map(j => j.id)).toEqual(['z', 'b']);
    expect(model.cursor).toBe(3);
  });

  it('starts over when the server says `reset`', () => {
    const model = new JobsModel();
    model.apply(answer([job({ id: 'a' })], 4), 0, 2000);
    const change = model.apply({ ...answer([job({ id: 'b' })], 9), reset: true }, 4, 2000);
    expect(change).toEqual({ reset: true, updated: ['b'], removed: ['a'] });
    expect(model.jobs.map(j => j.id)).toEqual(['b']);
  });

  it('keeps the server clock offset and computes elapsed with it', () => {
    const model = new JobsModel();
    model.apply(answer([job({ id: 'a', submitted: 1000 })], 1, 1100), 0, 1000);
    expect(model.clockOffset).toBe(100);
    expect(model.serverNow(1020)).toBe(1120);
    expect(model.rows(1020)[0].elapsed).toBe('2m 00s');
    expect(model.backend).toBe('local');
    expect(model.user).toBe('alice');
  });

  it('counts RUNNING and STARTING as running, QUEUED as queued', () => {
    const model = new JobsModel();
    model.apply(
      answer(
        [
          job({ id: 'a', state: 'RUNNING' }),
          job({ id: 'b', state: 'STARTING' }),
          job({ id: 'c', state: 'QUEUED' }),
          job({ id: 'd', state: 'FAILED' }),
          job({ id: 'e', state: 'CANCELLED' }),
          job({ id: 'f', state: 'SUCCEEDED' })
        ],
        1
      ),
      0,
      2000
    );
    expect(model.counts()).toEqual({ running: 2, queued: 1 });
    expect(model.statusText()).toBe('2 running · 1 queued');
  });

  it('clear() forgets everything', () => {
    const model = new JobsModel();
    model.apply(answer([job({ id: 'a' })], 7), 0, 2000);
    model.clear();
    expect(model.cursor).toBe(0);
    expect(model.jobs).toEqual([]);
    expect(model.loaded).toBe(false);
  });
});
