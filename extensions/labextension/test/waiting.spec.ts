/**
 * The sidebar's words for a queued job are the CLI's, the panel's and the pages'
 * (aviflow/views/waiting.py): both are checked on waiting_samples.json
 * (tests/core/test_waiting_views.py for the Python side).
 */
import type { ExpectedStart, WaitNumbers } from '../src/types';
import { startShort, startWords, validEstimate, waitingLines, waitWords } from '../src/waiting';
import samples from './waiting_samples.json';

interface Sample {
  name: string;
  expectedStart?: ExpectedStart;
  wait?: WaitNumbers;
  message: string;
  short: string;
  lines: string[];
}

const SAMPLES = samples as unknown as { now: number; samples: Sample[] };

describe('waiting words', () => {
  it.each(SAMPLES.samples.map(s => [s.name, s] as const))('match the Python words: %s', (_, s) => {
    const now = SAMPLES.now;
    expect(startShort(s.expectedStart, now)).toBe(s.short);
    expect(waitingLines(s.expectedStart, s.wait, s.message, now)).toEqual(s.lines);
  });

  it('shows nothing for what is absent or malformed', () => {
    expect(startWords(undefined, 0)).toBe('');
    expect(startShort(null, 0)).toBe('-');
    const bad: unknown[] = [{ low: 'soon', high: null }, { low: -1, high: 2 }, { low: NaN, high: null }, [1, 2], 'x'];
    for (const est of bad) {
      expect(validEstimate(est)).toBeNull();
      expect(startWords(est as ExpectedStart, 0)).toBe('');
    }
    const wait = { queue: 'a', quota: 8, holds: 8, borrowed: 0, lendable: 0, ahead: 1, aheadGpus: 4 };
    expect(waitWords({ ...wait, ahead: -1 })).toBe('');
    expect(waitWords({ ...wait, quota: 1e30 })).toBe('');
    expect(waitWords(null)).toBe('');
  });
});
