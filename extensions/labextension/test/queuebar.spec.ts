/**
 * The sidebar's queue bars are aviflow-api's pages' (aviflow/views/queue_bar.py): both are
 * checked on queue_bar_samples.json (tests/core/test_queue_bar.py for the Python side).
 */
import { queueBar, QueueBar } from '../src/queuebar';
import type { QueueQuota } from '../src/types';
import samples from './queue_bar_samples.json';

interface Sample {
  name: string;
  queue: QueueQuota;
  bar: QueueBar;
}

const SAMPLES = (samples as unknown as { samples: Sample[] }).samples;

describe('queueBar', () => {
  it.each(SAMPLES.map(s => [s.name, s] as const))('matches the Python bar: %s', (_, s) => {
    expect(queueBar(s.queue)).toEqual(s.bar);
  });

  it('counts a lendable number an older server does not send as 0', () => {
    const cohort = SAMPLES.find(s => s.name === 'idle GPUs in the cohort')!.queue;
    const { lendable: _, ...older } = cohort;
    expect(queueBar(older as QueueQuota).label).toBe('8 / 8 GPUs · 1 pending');
    expect(queueBar(older as QueueQuota)).toEqual(queueBar({ ...cohort, lendable: 0 }));
  });
});
