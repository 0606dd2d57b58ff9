import { Poller } from '../src/poller';
import { flush } from './fixtures';

/** A task whose runs the test finishes one by one. */
function controlledTask() {
  const pending: { resolve: () => void; reject: (e: Error) => void }[] = [];
  let starts = 0;
  const task = () => {
    starts += 1;
    return new Promise<void>((resolve, reject) => pending.push({ resolve, reject }));
  };
  return {
    task,
    get starts() {
      return starts;
    },
    async succeed() {
      pending.shift()!.resolve();
      await flush();
    },
    async fail() {
      pending.shift()!.reject(new Error('down'));
      await flush();
    },
    get inFlight() {
      return pending.length;
    }
  };
}

describe('Poller', () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());

  it('starts paused, runs at once on resume, then every interval after each run ends', async () => {
    const t = controlledTask();
    const poller = new Poller({ task: t.task, interval: 2000, maxBackoff: 30000 });
    jest.advanceTimersByTime(10000);
    expect(t.starts).toBe(0);

    poller.resume();
    expect(t.starts).toBe(1);
    // The run takes 5 s: no second run overlaps it.
    jest.advanceTimersByTime(5000);
    expect(t.starts).toBe(1);
    await t.succeed();
    jest.advanceTimersByTime(1999);
    expect(t.starts).toBe(1);
    jest.advanceTimersByTime(1);
    expect(t.starts).toBe(2);
    poller.dispose();
  });

  it('backs off exponentially on failures up to maxBackoff, and resets on success', async () => {
    const t = controlledTask();
    const poller = new Poller({ task: t.task, interval: 2000, maxBackoff: 10000 });
    poller.resume();
    const waits: number[] = [];
    for (let i = 0; i < 4; i++) {
      await t.fail();
      waits.push(poller.delay);
      jest.advanceTimersByTime(poller.delay);
    }
    expect(waits).toEqual([4000, 8000, 10000, 10000]);
    expect(poller.failures).toBe(4);
    expect(t.starts).toBe(5);
    await t.succeed();
    expect(poller.failures).toBe(0);
    expect(poller.delay).toBe(2000);
    poller.dispose();
  });

  it('pause() stops scheduling; resume() runs at once again', async () => {
    const t = controlledTask();
    const poller = new Poller({ task: t.task, interval: 2000, maxBackoff: 30000 });
    poller.resume();
    poller.pause();
    await t.succeed();
    jest.advanceTimersByTime(60000);
    expect(t.starts).toBe(1);
    poller.resume();
    expect(t.starts).toBe(2);
    poller.dispose();
  });

  it('refresh() during a run runs once more right after it, not concurrently', async () => {
    const t = controlledTask();
    const poller = new Poller({ task: t.task, interval: 2000, maxBackoff: 30000 });
    poller.resume();
    const done = jest.fn();
    void poller.refresh().then(done);
    void poller.refresh();
    expect(t.starts).toBe(1);
    expect(t.inFlight).toBe(1);
    await t.succeed();
    expect(t.starts).toBe(2);
    expect(done).not.toHaveBeenCalled();
    await t.succeed();
    expect(done).toHaveBeenCalledTimes(1);
    expect(t.starts).toBe(2);
    poller.dispose();
  });

  it('setInterval() reschedules the next run', async () => {
    const t = controlledTask();
    const poller = new Poller({ task: t.task, interval: 15000, maxBackoff: 30000 });
    poller.resume();
    await t.succeed();
    poller.setInterval(2000);
    await flush(); // the Poll sets its timer once the tick before it settled
    jest.advanceTimersByTime(2000);
    expect(t.starts).toBe(2);
    poller.dispose();
  });

  it('refresh() while paused runs once and does not resume', async () => {
    const t = controlledTask();
    const poller = new Poller({ task: t.task, interval: 2000, maxBackoff: 30000 });
    const done = jest.fn();
    void poller.refresh().then(done);
    expect(t.starts).toBe(1);
    await t.succeed();
    expect(done).toHaveBeenCalledTimes(1);
    jest.advanceTimersByTime(60000);
    expect([t.starts, poller.paused]).toEqual([1, true]);
    poller.dispose();
  });

  it('dispose() stops the timer for good', async () => {
    const t = controlledTask();
    const poller = new Poller({ task: t.task, interval: 2000, maxBackoff: 30000 });
    poller.resume();
    await t.succeed();
    poller.dispose();
    jest.advanceTimersByTime(60000);
    poller.resume();
    await poller.refresh();
    expect([t.starts, poller.isDisposed]).toEqual([1, true]);
  });
});
