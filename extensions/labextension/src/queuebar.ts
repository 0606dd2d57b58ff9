/**
 * A queue as a bar and a line of words: the TypeScript mirror of aviflow/views/queue_bar.py,
 * which aviflow-api's pages render. Both are checked on test/queue_bar_samples.json
 * (test/queuebar.spec.ts here, tests/core/test_queue_bar.py there), so they cannot drift.
 *
 * The scale is max(quota, in use + the GPUs the waiting jobs ask for); the segments are the
 * GPUs in use within the quota, those borrowed beyond it and those asked for, in percent of
 * the scale rounded half up to hundredths; the quota is a mark. Negative numbers count as 0
 * and a queue borrows at most what it holds.
 *
 *     queueBar(queue).label; // "5 / 4 GPUs · 1 pending · 2 borrowed · 4 idle in cohort"
 */
import type { QueueQuota } from './types';

/** A queue as a bar: segment widths in percent of max(quota, in use + pending GPUs). */
export interface QueueBar {
  queue: string;
  /** GPUs in use within the quota. */
  inQuotaPct: number;
  /** GPUs borrowed beyond the quota. */
  borrowedPct: number;
  /** GPUs the pending jobs ask for. */
  pendingPct: number;
  /** Where the nominal quota ends; null without a quota. */
  quotaPct: number | null;
  /** "3 / 4 GPUs · 1 pending · 2 borrowed · 4 idle in cohort", "3 GPUs · no quota limit". */
  label: string;
}

const pct = (part: number, whole: number): number =>
  whole > 0 ? Math.round((part / whole) * 10000) / 100 : 0;

/** The bar of one queue. */
export function queueBar(q: QueueQuota): QueueBar {
  const inUse = Math.max(0, q.gpusInUse);
  const borrowed = Math.min(Math.max(0, q.borrowed), inUse);
  const lendable = Math.max(0, q.lendable ?? 0);
  const pendingGpus = (q.pending ?? []).reduce((sum, p) => sum + Math.max(0, p.gpus), 0);
  const quota = q.gpuQuota;
  const scale = Math.max(quota ?? 0, inUse + pendingGpus);
  const parts = [quota === null ? `${inUse} GPUs · no quota limit` : `${inUse} / ${quota} GPUs`];
  if (q.pendingCount > 0) {
    parts.push(`${q.pendingCount} pending`);
  }
  if (borrowed > 0) {
    parts.push(`${borrowed} borrowed`);
  }
  if (lendable > 0) {
    parts.push(`${lendable} idle in cohort`);
  }
  return {
    queue: q.queue,
    inQuotaPct: pct(inUse - borrowed, scale),
    borrowedPct: pct(borrowed, scale),
    pendingPct: pct(pendingGpus, scale),
    quotaPct: quota === null ? null : pct(quota, scale),
    label: parts.join(' · ')
  };
}
