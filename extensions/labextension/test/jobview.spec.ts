/**
 * @jest-environment jsdom
 */
import { Widget } from '@lumino/widgets';

import { AviflowError } from '../src/errors';
import {
  CancelTarget,
  JobViewContent,
  keepLogTail,
  LOG_DROPPED_NOTE,
  LOG_KEEP_CHARS,
  sanitizeHtml
} from '../src/jobview';
import type { JobDetailAnswer, JobState } from '../src/types';
import { FakeClient, flush } from './fixtures';

function detail(state: JobState, html: Partial<JobDetailAnswer['html']> = {}, logRanks = [0, 1]): JobDetailAnswer {
  return {
    job: {
      id: 'j1',
      name: 'resnet',
      state,
      attempt: 1,
      message: null,
      queuePosition: null,
      nodes: 2,
      gpusPerNode: 8,
      submitted: 1000,
      finished: state === 'RUNNING' ? null : 1100,
      now: 1100,
      elapsed: 100,
      gpuHours: 0.4,
      failure: null,
      logRanks,
      checkpoints: [],
      metricRows: 0,
      metrics: {}
    },
    html: { header: '<h2 class="hdr">resnet</h2>', charts: '<svg class="chart"></svg>', ...html }
  };
}

function setup(confirm = true) {
  const client = new FakeClient();
  const asked: CancelTarget[] = [];
  const cancelled: string[] = [];
  const view = new JobViewContent({
    client,
    jobId: 'j1',
    confirmCancel: job => {
      asked.push(job);
      return Promise.resolve(confirm);
    },
    onCancelled: id => cancelled.push(id)
  });
  return { client, view, asked, cancelled };
}

const q = (root: Element, selector: string) => root.querySelector(selector) as HTMLElement;

describe('sanitizeHtml', () => {
  it('drops scripts, handlers and script URLs but keeps SVG', () => {
    const box = document.createElement('div');
    box.appendChild(
      sanitizeHtml(
        '<div onclick="x()">a<script>alert(1)</script><a href="javascript:alert(1)">l</a>' +
          '<svg><rect onload="y()" width="3"></rect></svg></div>'
      )
    );
    expect(box.innerHTML).toBe('<div>a<a>l</a><svg><rect width="3"></rect></svg></div>');
  });
});

describe('keepLogTail', () => {
  it('keeps at most the last characters, from a line start', () => {
    expect(LOG_KEEP_CHARS).toBe(262144);
    expect(keepLogTail('abc\n', 5)).toBe('abc\n');
    expect(keepLogTail('line1\nline2\nline3\n', 12)).toBe('line2\nline3\n');
    expect(keepLogTail('line1\nline2\nline3\n', 10)).toBe('line3\n');
    // one line longer than what is kept: its end
    expect(keepLogTail('aaaa\nbbbbbbbbbb', 8)).toBe('bbbbbbbb');
    expect(keepLogTail('x'.repeat(20) + '\n', 5)).toBe('xxxx\n');
  });
});

/** Line `i` of a log: 100 characters. */
const logLine = (i: number): string => `${String(i).padStart(6, '0')} ${'x'.repeat(92)}\n`;
const logLines = (from: number, to: number): string =>
  Array.from({ length: to - from }, (_, k) => logLine(from + k)).join('');

describe('JobViewContent', () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => {
    jest.useRealTimers();
    document.body.innerHTML = '';
  });

  it('shows the server sections and the tail of the first rank, then appends', async () => {
    const { client, view } = setup();
    client.jobReplies.push(detail('RUNNING', { header: '<h2 class="hdr">resnet<script>bad()</script></h2>' }));
    client.logReplies.push(
      { rank: 0, text: 'step 1\n', offset: 0, next: 7, size: 7 },
      { rank: 0, text: 'step 2\n', offset: 7, next: 14, size: 14 }
    );
    Widget.attach(view, document.body);
    await flush(20);
    expect(client.calls).toEqual(['job j1', 'logs j1 0 tail=200']);
    expect(view.title.label).toBe('resnet');
    const header = q(view.node, '[data-section="header"]');
    expect(header.innerHTML).toBe('<h2 class="hdr">resnet</h2>');
    expect(q(view.node, '[data-section="failure"]').hidden).toBe(true);
    expect(view.node.querySelector('[data-section="charts"] svg.chart')).not.toBeNull();
    const select = q(view.node, 'select.aviflow-log-rank') as HTMLSelectElement;
    expect(Array.from(select.options).map(o => o.textContent)).toEqual(['rank 0', 'rank 1']);
    expect(select.value).toBe('0');
    expect(q(view.node, 'pre.aviflow-log-text').textContent).toBe('step 1\n');
    expect(q(view.node, 'button.aviflow-cancel').hidden).toBe(false);

    jest.advanceTimersByTime(2000);
    await flush(20);
    expect(client.calls.slice(2)).toEqual(['job j1', 'logs j1 0 offset=7']);
    expect(q(view.node, 'pre.aviflow-log-text').textContent).toBe('step 1\nstep 2\n');
    // Unchanged sections are not re-inserted.
    expect(q(view.node, '[data-section="header"]').firstChild).toBe(header.firstChild);
    view.dispose();
  });

  it('keeps only the last 256 KiB of a log in the DOM, cut at a line start', async () => {
    const { client, view } = setup();
    client.jobReplies.push(detail('RUNNING'));
    client.logReplies.push(
      { rank: 0, text: logLines(0, 3000), offset: 0, next: 300000, size: 300000 },
      { rank: 0, text: logLines(3000, 3010), offset: 300000, next: 301000, size: 301000 }
    );
    Widget.attach(view, document.body);
    await flush(20);
    const pre = q(view.node, 'pre.aviflow-log-text');
    const note = q(view.node, '.aviflow-log-dropped');
    // 300,000 characters read: the last 2,621 whole lines (262,100 characters) are kept
    expect(pre.textContent).toBe(logLines(379, 3000));
    expect(pre.textContent!.length).toBe(262100);
    expect(note.hidden).toBe(false);
    expect(note.textContent).toBe(LOG_DROPPED_NOTE);
    expect(note.nextElementSibling).toBe(pre); // at the top of the log
    jest.advanceTimersByTime(2000);
    await flush(20);
    expect(client.calls).toEqual(['job j1', 'logs j1 0 tail=200', 'job j1', 'logs j1 0 offset=300000']);
    expect(pre.textContent).toBe(logLines(389, 3010));
    expect(pre.childNodes.length).toBe(1);
    view.dispose();
  });

  it('reads on from the part it keeps when far more was written', async () => {
    const { client, view } = setup();
    client.jobReplies.push(detail('RUNNING'));
    client.logReplies.push(
      { rank: 0, text: 'start\n', offset: 0, next: 6, size: 6 },
      { rank: 0, text: logLines(0, 10), offset: 6, next: 1006, size: 5000006 },
      { rank: 0, text: 'rest of a line\n' + logLines(50000, 50005), offset: 4737862, next: 5000006, size: 5000006 }
    );
    Widget.attach(view, document.body);
    await flush(20);
    const pre = q(view.node, 'pre.aviflow-log-text');
    expect(pre.textContent).toBe('start\n');
    expect(q(view.node, '.aviflow-log-dropped').hidden).toBe(true); // the whole log so far
    jest.advanceTimersByTime(2000);
    await flush(40);
    // 4,999,000 bytes behind: the next read starts 256 KiB before the end, mid-line
    expect(client.calls.slice(2)).toEqual(['job j1', 'logs j1 0 offset=6', 'logs j1 0 offset=4737862']);
    expect(5000006 - LOG_KEEP_CHARS).toBe(4737862);
    expect(pre.textContent).toBe(logLines(50000, 50005));
    expect(q(view.node, '.aviflow-log-dropped').hidden).toBe(false);
    view.dispose();
  });

  it('re-reads the tail when the rank changes', async () => {
    const { client, view } = setup();
    client.jobReplies.push(detail('RUNNING'));
    client.logReplies.push({ rank: 0, text: 'zero\n', offset: 0, next: 5, size: 5 });
    Widget.attach(view, document.body);
    await flush(20);
    client.logReplies.splice(0, 1, { rank: 1, text: 'one\n', offset: 0, next: 4, size: 4 });
    const select = q(view.node, 'select.aviflow-log-rank') as HTMLSelectElement;
    select.value = '1';
    select.dispatchEvent(new Event('change'));
    await flush(20);
    expect(client.calls.at(-1)).toBe('logs j1 1 tail=200');
    expect(q(view.node, 'pre.aviflow-log-text').textContent).toBe('one\n');
    view.dispose();
  });

  it('polls once more after the job finished, then stops', async () => {
    const { client, view } = setup();
    client.jobReplies.push(detail('RUNNING', {}, []), detail('SUCCEEDED', {}, []));
    Widget.attach(view, document.body);
    await flush(20);
    jest.advanceTimersByTime(2000);
    await flush(20);
    expect(view.done).toBe(false);
    expect(q(view.node, 'button.aviflow-cancel').hidden).toBe(true);
    jest.advanceTimersByTime(2000);
    await flush(20);
    expect(view.done).toBe(true);
    jest.advanceTimersByTime(20000);
    await flush(20);
    expect(client.calls).toEqual(['job j1', 'job j1', 'job j1']);
    expect(view.node.dataset.state).toBe('SUCCEEDED');
    view.dispose();
  });

  it('polls a finished job until the server has caught up with what it logged', async () => {
    const { client, view } = setup();
    const reading = detail('SUCCEEDED', {}, []);
    reading.job.catchingUp = true;
    client.jobReplies.push(reading, reading, detail('SUCCEEDED', {}, []));
    Widget.attach(view, document.body);
    for (let tick = 0; tick < 3; tick++) {
      await flush(20);
      expect(view.done).toBe(false);
      jest.advanceTimersByTime(2000);
    }
    await flush(20);
    expect(view.done).toBe(true);
    jest.advanceTimersByTime(20000);
    await flush(20);
    expect(client.calls).toEqual(['job j1', 'job j1', 'job j1', 'job j1']);
    view.dispose();
  });

  it('does not poll while hidden', async () => {
    const { client, view } = setup();
    client.jobReplies.push(detail('RUNNING', {}, []));
    Widget.attach(view, document.body);
    await flush(20);
    view.hide();
    jest.advanceTimersByTime(20000);
    await flush(20);
    expect(client.calls).toEqual(['job j1']);
    view.show();
    await flush(20);
    expect(client.calls).toEqual(['job j1', 'job j1']);
    view.dispose();
  });

  it('cancels after confirmation and reads the job again', async () => {
    const { client, view, asked, cancelled } = setup(true);
    client.jobReplies.push(detail('RUNNING', {}, []), detail('CANCELLED', {}, []));
    client.cancelReplies.push({ id: 'j1', cancelled: true, state: 'CANCELLED' });
    Widget.attach(view, document.body);
    await flush(20);
    q(view.node, 'button.aviflow-cancel').click();
    await flush(20);
    expect(asked).toEqual([{ id: 'j1', name: 'resnet', state: 'RUNNING' }]);
    expect(cancelled).toEqual(['j1']);
    expect(client.calls).toEqual(['job j1', 'cancel j1', 'job j1']);
    expect(q(view.node, 'button.aviflow-cancel').hidden).toBe(true);
    view.dispose();
  });

  it('does nothing when the user keeps the job running', async () => {
    const { client, view, cancelled } = setup(false);
    client.jobReplies.push(detail('RUNNING', {}, []));
    Widget.attach(view, document.body);
    await flush(20);
    await view.cancel();
    expect(client.calls).toEqual(['job j1']);
    expect(cancelled).toEqual([]);
    view.dispose();
  });

  it('shows errors in the view and stops on 404', async () => {
    const { client, view } = setup();
    client.jobReplies.push(new AviflowError(404, 'JobNotFound', 'No job j1.'));
    Widget.attach(view, document.body);
    await flush(20);
    const banner = q(view.node, '.aviflow-error');
    expect(banner.hidden).toBe(false);
    expect(banner.textContent).toBe('No job j1.');
    expect(view.done).toBe(true);
    jest.advanceTimersByTime(60000);
    await flush(20);
    expect(client.calls).toEqual(['job j1']);
    view.dispose();
  });
});
