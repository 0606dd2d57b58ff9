/**
 * @jest-environment jsdom
 */
import { Widget } from '@lumino/widgets';

import { AviflowError } from '../src/errors';
import { AviflowFeed } from '../src/feed';
import { AviflowSidebar, EMPTY_HINT } from '../src/sidebar';
import { AviflowStatus } from '../src/statusbar';
import { answer, FakeClient, flush, job, queue } from './fixtures';

const NOW = 5000;

function setup() {
  const client = new FakeClient();
  const feed = new AviflowFeed(client, { now: () => NOW });
  const opened: string[] = [];
  const sidebar = new AviflowSidebar({ feed, openJob: id => opened.push(id) });
  return { client, feed, sidebar, opened };
}

const q = (root: Element, selector: string) => root.querySelector(selector) as HTMLElement;
const texts = (root: Element, selector: string) =>
  Array.from(root.querySelectorAll(selector)).map(node => node.textContent);

describe('AviflowSidebar', () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => {
    jest.useRealTimers();
    document.body.innerHTML = '';
  });

  it('polls only while shown and renders jobs, newest first', async () => {
    const { client, feed, sidebar } = setup();
    client.jobsReplies.push(
      answer(
        [
          job({
            id: 'j2',
            name: 'bert',
            state: 'QUEUED',
            queuePosition: 2,
            message: 'waiting for admission: quota',
            submitted: 4900,
            nodes: 2,
            expectedStart: { low: 5300, high: 5720 },
            wait: { queue: 'vision', quota: 8, holds: 8, borrowed: 0, lendable: 4, ahead: 2, aheadGpus: 12 }
          }),
          job({
            id: 'j1',
            name: 'resnet',
            state: 'FAILED',
            submitted: 4000,
            finished: 4185,
            gpuSeconds: 432,
            failure: { rank: 3, attempt: 1, exception: 'ValueError', message: 'bad shape' }
          })
        ],
        4,
        NOW
      )
    );
    client.queuesReplies.push({ queues: [] });
    expect(client.calls).toEqual([]);

    Widget.attach(sidebar, document.body);
    await flush();
    expect(client.calls).toEqual(['jobs?since=0', 'queues']);

    const node = sidebar.node;
    expect(node.id).toBe('aviflow-sidebar');
    expect(Array.from(node.querySelectorAll('.aviflow-job')).map(r => r.getAttribute('data-job-id'))).toEqual([
      'j2',
      'j1'
    ]);
    const queued = q(node, '.aviflow-job[data-job-id="j2"]');
    expect(queued.dataset.state).toBe('QUEUED');
    expect(q(queued, '.aviflow-job-name').textContent).toBe('bert');
    expect(q(queued, '.aviflow-badge').textContent).toBe('queued');
    expect(q(queued, '.aviflow-badge').dataset.state).toBe('QUEUED');
    expect(q(queued, '.aviflow-job-position').textContent).toBe('#2 in queue');
    expect(q(queued, '.aviflow-job-reason').textContent).toBe('waiting for admission: quota');
    // when it starts and why it waits, in the words of the CLI, the panel and the pages
    expect(texts(queued, '.aviflow-job-position, .aviflow-job-start, .aviflow-job-reason, .aviflow-job-wait')).toEqual([
      '#2 in queue',
      'starts in about 5-12 min',
      'waiting for admission: quota',
      'queue vision: quota 8 GPUs, holds 8 (0 borrowed), 4 idle in the cohort to borrow; 2 jobs ahead (12 GPUs)'
    ]);
    expect(q(queued, '.aviflow-job-start').title).toBe('starts in about 5-12 min');
    expect(q(queued, '.aviflow-job-elapsed').textContent).toBe('1m 40s');
    expect(q(queued, '.aviflow-job-gpuh').textContent).toBe('0.00 GPU-h');
    expect(q(queued, '.aviflow-job-size').textContent).toBe('2 × 8 GPUs');
    expect(queued.querySelector('.aviflow-job-failure')).toBeNull();

    const failed = q(node, '.aviflow-job[data-job-id="j1"]');
    expect(q(failed, '.aviflow-job-failure').textContent).toBe('rank 3 failed: ValueError: bad shape');
    expect(q(failed, '.aviflow-job-elapsed').textContent).toBe('3m 05s');
    expect(q(failed, '.aviflow-job-gpuh').textContent).toBe('0.12 GPU-h');
    expect(failed.querySelector('.aviflow-job-position')).toBeNull();
    expect(failed.querySelector('.aviflow-job-reason')).toBeNull();
    expect(failed.querySelector('.aviflow-job-start')).toBeNull();
    expect(failed.querySelector('.aviflow-job-wait')).toBeNull();
    expect(q(node, '.aviflow-error').hidden).toBe(true);
    expect(q(node, '.aviflow-jobs-empty').hidden).toBe(true);
    expect(q(node, '.aviflow-queues-empty').textContent).toBe('No team queues.');

    // Hidden: no more polls (no status bar asked for a background poll).
    sidebar.hide();
    jest.advanceTimersByTime(60000);
    await flush();
    expect(client.calls).toEqual(['jobs?since=0', 'queues']);
    sidebar.dispose();
    feed.dispose();
  });

  it('updates rows in place from increments and removes dropped ones', async () => {
    const { client, feed, sidebar } = setup();
    client.jobsReplies.push(
      answer([job({ id: 'a', submitted: 100, state: 'QUEUED', queuePosition: 1 }), job({ id: 'b', submitted: 50 })], 2, NOW),
      answer([job({ id: 'a', submitted: 100, state: 'RUNNING' })], 3, NOW, ['b']),
      answer([job({ id: 'c', submitted: 200 })], 4, NOW)
    );
    client.queuesReplies.push({ queues: [] });
    Widget.attach(sidebar, document.body);
    await flush();
    const rowA = q(sidebar.node, '.aviflow-job[data-job-id="a"]');
    const nameA = q(rowA, '.aviflow-job-name');
    expect(q(rowA, '.aviflow-job-position').textContent).toBe('#1 in queue');

    jest.advanceTimersByTime(2000);
    await flush();
    expect(client.calls.filter(c => c.startsWith('jobs'))).toEqual(['jobs?since=0', 'jobs?since=2']);
    // The same row and name element, updated in place.
    expect(q(sidebar.node, '.aviflow-job[data-job-id="a"]')).toBe(rowA);
    expect(q(rowA, '.aviflow-job-name')).toBe(nameA);
    expect(rowA.dataset.state).toBe('RUNNING');
    expect(rowA.querySelector('.aviflow-job-position')).toBeNull();
    expect(sidebar.node.querySelector('.aviflow-job[data-job-id="b"]')).toBeNull();

    jest.advanceTimersByTime(2000);
    await flush();
    expect(texts(sidebar.node, '.aviflow-job-name')).toEqual(['c', 'a']);
    expect(q(sidebar.node, '.aviflow-job[data-job-id="a"]')).toBe(rowA);
    sidebar.dispose();
    feed.dispose();
  });

  it('renders queues as bars with data attributes', async () => {
    const { client, feed, sidebar } = setup();
    client.jobsReplies.push(answer([], 1, NOW));
    client.queuesReplies.push({
      queues: [
        queue({
          queue: 'vision-q',
          gpuQuota: 4,
          gpusInUse: 5,
          borrowed: 2,
          pendingCount: 1,
          pending: [{ id: 'p', user: 'bob', position: 1, gpus: 3 }]
        }),
        queue({ queue: 'open-q', team: null, gpuQuota: null, gpusInUse: 1 })
      ]
    });
    Widget.attach(sidebar, document.body);
    await flush();
    const bars = sidebar.node.querySelectorAll<HTMLElement>('.aviflow-queue');
    expect(bars.length).toBe(2);
    expect({ ...bars[0].dataset }).toEqual({
      queue: 'vision-q',
      inUse: '5',
      pending: '1',
      quota: '4',
      borrowed: '2',
      lendable: '0'
    });
    expect(bars[1].dataset.quota).toBe('');
    expect(q(bars[0], '.aviflow-queue-label').textContent).toBe('5 / 4 GPUs · 1 pending · 2 borrowed');
    expect(q(bars[1], '.aviflow-queue-label').textContent).toBe('1 GPUs · no quota limit');
    expect(q(bars[0], '.aviflow-queue-seg-inquota').style.width).toBe('37.5%');
    expect(q(bars[0], '.aviflow-queue-seg-borrowed').style.width).toBe('25%');
    expect(q(bars[0], '.aviflow-queue-seg-pending').style.width).toBe('37.5%');
    expect(q(bars[0], '.aviflow-queue-quota-mark').style.left).toBe('50%');
    expect(q(sidebar.node, '.aviflow-jobs-empty').textContent).toBe(EMPTY_HINT);
    expect(q(sidebar.node, '.aviflow-jobs-empty').hidden).toBe(false);
    sidebar.dispose();
    feed.dispose();
  });

  it('shows the server message when aviflow-api is unreachable, and clears it after', async () => {
    const { client, feed, sidebar } = setup();
    client.jobsReplies.push(
      new AviflowError(503, 'BackendUnavailable', 'aviflow-api cannot be reached; try again later.'),
      answer([job({ id: 'a' })], 1, NOW)
    );
    client.queuesReplies.push({ queues: [] });
    Widget.attach(sidebar, document.body);
    await flush();
    const banner = q(sidebar.node, '.aviflow-error');
    expect(banner.hidden).toBe(false);
    expect(banner.dataset.error).toBe('BackendUnavailable');
    expect(banner.textContent).toBe('aviflow-api cannot be reached; try again later. retrying…');

    // Backoff: the retry comes after 4 s, not 2 s.
    jest.advanceTimersByTime(2000);
    await flush();
    expect(client.calls.filter(c => c.startsWith('jobs')).length).toBe(1);
    jest.advanceTimersByTime(2000);
    await flush();
    expect(client.calls.filter(c => c.startsWith('jobs')).length).toBe(2);
    expect(banner.hidden).toBe(true);
    expect(texts(sidebar.node, '.aviflow-job-name')).toEqual(['a']);
    sidebar.dispose();
    feed.dispose();
  });

  it('opens a job on click and on Enter', async () => {
    const { client, feed, sidebar, opened } = setup();
    client.jobsReplies.push(answer([job({ id: 'a' })], 1, NOW));
    client.queuesReplies.push({ queues: [] });
    Widget.attach(sidebar, document.body);
    await flush();
    const row = q(sidebar.node, '.aviflow-job');
    expect(row.tabIndex).toBe(0);
    q(row, '.aviflow-job-name').click();
    row.dispatchEvent(new KeyboardEvent('keydown', { key: 'Enter', bubbles: true }));
    row.dispatchEvent(new KeyboardEvent('keydown', { key: 'x', bubbles: true }));
    expect(opened).toEqual(['a', 'a']);
    sidebar.dispose();
    feed.dispose();
  });
});

describe('AviflowStatus and background polling', () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());

  it('keeps a 15 s poll for the status bar while the sidebar is hidden', async () => {
    const client = new FakeClient();
    const feed = new AviflowFeed(client, { now: () => NOW });
    client.jobsReplies.push(
      answer([job({ id: 'a', state: 'RUNNING' }), job({ id: 'b', state: 'STARTING' }), job({ id: 'c', state: 'QUEUED' })], 3, NOW),
      answer([job({ id: 'a', state: 'SUCCEEDED', finished: NOW })], 4, NOW)
    );
    const clicks: number[] = [];
    const status = new AviflowStatus(feed, () => clicks.push(1));
    expect(status.node.textContent).toBe('Aviflow');
    feed.setBackgroundPolling(true);
    await flush();
    expect(status.id).toBe('aviflow-status');
    expect(status.node.textContent).toBe('2 running · 1 queued');
    jest.advanceTimersByTime(14999);
    await flush();
    expect(client.calls).toEqual(['jobs?since=0']);
    jest.advanceTimersByTime(1);
    await flush();
    expect(client.calls).toEqual(['jobs?since=0', 'jobs?since=3']);
    expect(status.node.textContent).toBe('1 running · 1 queued');

    // A hidden browser tab stops it.
    feed.setDocumentHidden(true);
    jest.advanceTimersByTime(60000);
    await flush();
    expect(client.calls.length).toBe(2);

    status.node.click();
    expect(clicks).toEqual([1]);
    status.dispose();
    feed.dispose();
  });

  it('says the feed is unavailable before any answer', async () => {
    const client = new FakeClient();
    const feed = new AviflowFeed(client);
    client.jobsReplies.push(new AviflowError(0, 'NetworkError', 'The notebook server cannot be reached.'));
    const status = new AviflowStatus(feed, () => undefined);
    feed.setBackgroundPolling(true);
    await flush();
    expect(status.node.textContent).toBe('Aviflow unavailable');
    expect(status.node.title).toBe('Aviflow: The notebook server cannot be reached.');
    status.dispose();
    feed.dispose();
  });
});
