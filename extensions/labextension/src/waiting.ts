/**
 * A queued job's expected start and the numbers behind its wait, in words: the mirror of
 * aviflow/views/waiting.py (the CLI, the panel and aviflow-api's pages), so the sidebar
 * says the same. Both are tested on the same samples (test/waiting_samples.json).
 *
 *     startShort({ low: now + 300, high: now + 720 }, now); // "5-12 min"
 *     startWords({ low: now + 300, high: now + 720 }, now); // "starts in about 5-12 min"
 *     startWords({ low: now + 300, high: now + 720, expected: now + 480 }, now);
 *     // "starts in about 8 min (5-12 min)"
 */
import type { ExpectedStart, WaitNumbers } from './types';

/** What a job without an estimate shows where a short form is asked for. */
export const NO_ESTIMATE = '-';
/** Seconds: a start this close (or past) is "any moment". */
export const SOON = 30;

const isTime = (v: unknown): v is number | null =>
  v === null || (typeof v === 'number' && Number.isFinite(v) && v >= 0);

const isCount = (v: unknown): v is number =>
  typeof v === 'number' && Number.isInteger(v) && v >= 0 && v < 2 ** 31;

/** The estimate as the server sent it, or null where it is absent or malformed. */
export function validEstimate(est: unknown): ExpectedStart | null {
  if (!est || typeof est !== 'object' || Array.isArray(est)) {
    return null;
  }
  const e = est as Record<string, unknown>;
  const never = e.never;
  if (!isTime(e.low ?? null) || !isTime(e.high ?? null) || !isTime(e.expected ?? null)) {
    return null;
  }
  if (never !== undefined && never !== null && typeof never !== 'string') {
    return null;
  }
  return {
    low: (e.low as number | null | undefined) ?? null,
    high: (e.high as number | null | undefined) ?? null,
    never: typeof never === 'string' ? never.slice(0, 500) : undefined,
    now: e.now === true,
    expected: typeof e.expected === 'number' ? e.expected : undefined
  };
}

/** The numbers as the server sent them, or null where they are absent or malformed. */
export function validWait(wait: unknown): WaitNumbers | null {
  if (!wait || typeof wait !== 'object' || Array.isArray(wait)) {
    return null;
  }
  const w = wait as Record<string, unknown>;
  const keys = ['quota', 'holds', 'borrowed', 'lendable', 'ahead', 'aheadGpus'] as const;
  if (typeof w.queue !== 'string' || !keys.every(k => isCount(w[k]))) {
    return null;
  }
  return { ...(w as unknown as WaitNumbers), queue: w.queue.slice(0, 253) };
}

/** Half up, as Python's `math.floor(x + 0.5)` in the mirror. */
const round = (x: number): number => Math.floor(x + 0.5);

/** A duration as a person reads a wait: "5 min" (under 90 min), "2 h" (under 2 days), "2 d". */
export function amount(seconds: number): string {
  const s = Math.max(0, seconds);
  if (s < 90 * 60) {
    return `${round(s / 60)} min`;
  }
  if (s < 48 * 3600) {
    return `${round(s / 3600)} h`;
  }
  return `${round(s / 86400)} d`;
}

function span(low: number, high: number): string {
  const a = amount(low);
  const b = amount(Math.max(low, high));
  if (a === b) {
    return `about ${a}`;
  }
  if (a === '0 min') {
    return `within ${b}`;
  }
  const [numA, unitA] = a.split(' ');
  return unitA === b.split(' ')[1] ? `${numA}-${b}` : `${a}-${b}`;
}

/** A column's worth: "5-12 min", "now", "never", "any moment", "5 min+", "unknown", "-". */
export function startShort(est: ExpectedStart | null | undefined, now: number): string {
  const e = validEstimate(est);
  if (!e || (!e.never && !e.now && e.low === null && e.high === null)) {
    return NO_ESTIMATE;
  }
  if (e.never !== undefined) {
    return 'never';
  }
  if (e.now) {
    return 'now';
  }
  const low = (e.low || now) - now;
  if (e.high === null) {
    return amount(low) === '0 min' ? 'unknown' : `${amount(low)}+`;
  }
  if (e.high - now < SOON) {
    return 'any moment';
  }
  return span(low, e.high - now);
}

/**
 * A sentence: "starts in about 8 min (5-12 min)" (its expected start, then its range; "starts
 * in about 5-12 min" without one), "starts now", "never at this quota: ..."; "" without.
 */
export function startWords(est: ExpectedStart | null | undefined, now: number): string {
  const short = startShort(est, now);
  const e = validEstimate(est);
  if (!e || short === NO_ESTIMATE) {
    return '';
  }
  if (e.never !== undefined) {
    return `never at this quota: ${e.never}`;
  }
  if (e.now || short === 'any moment') {
    return `starts ${short}`;
  }
  if (short === 'unknown') {
    return 'start unknown: a job ahead has no time limit';
  }
  if (e.high === null) {
    return `starts in ${short.slice(0, -1)} or later (a job ahead has no time limit)`;
  }
  const expected = e.expected === undefined ? null : amount(e.expected - now);
  if (expected !== null && expected !== '0 min' && !short.startsWith('about ')) {
    return `starts in about ${expected} (${short})`;
  }
  if (short.startsWith('within ')) {
    return `starts ${short}`;
  }
  return short.startsWith('about ') ? `starts in ${short}` : `starts in about ${short}`;
}

const count = (n: number, one: string, many: string): string => `${n} ${n === 1 ? one : many}`;

/** Why it waits, in its own queue's numbers (the jobs ahead counted, never named). */
export function waitWords(wait: WaitNumbers | null | undefined): string {
  const w = validWait(wait);
  if (!w) {
    return '';
  }
  const ahead = w.ahead
    ? `${count(w.ahead, 'job', 'jobs')} ahead (${count(w.aheadGpus, 'GPU', 'GPUs')})`
    : 'no job ahead';
  return (
    `queue ${w.queue}: quota ${count(w.quota, 'GPU', 'GPUs')}, holds ${w.holds} ` +
    `(${w.borrowed} borrowed), ${w.lendable} idle in the cohort to borrow; ${ahead}`
  );
}

/** The lines a view shows of a queued job: its start, the numbers, the reason. */
export function waitingLines(
  est: ExpectedStart | null | undefined,
  wait: WaitNumbers | null | undefined,
  reason: string,
  now: number
): string[] {
  const lines = [startWords(est, now), waitWords(wait)];
  if (reason) {
    lines.push(`reason: ${reason}`);
  }
  return lines.filter(line => line);
}
