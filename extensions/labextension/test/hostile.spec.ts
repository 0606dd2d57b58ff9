/**
 * @jest-environment jsdom
 *
 * HTML and script planted in every field a job or a user writes stay text in the sidebar and
 * the job view. `hostile_job.json` is what the server extension answers for a job whose every
 * field carries `<script>alert('<field>')</script><img src=x onerror=alert('<field>')>`,
 * rendered by the Python views (tests/hub/test_rendering_hostile.py keeps it current).
 */
import { Widget } from '@lumino/widgets';

import { AviflowError } from '../src/errors';
import { AviflowFeed } from '../src/feed';
import { JobViewContent, sanitizeHtml } from '../src/jobview';
import { AviflowSidebar } from '../src/sidebar';
import { AviflowStatus } from '../src/statusbar';
import type { JobDetailAnswer, QueueQuota } from '../src/types';
import { answer, FakeClient, flush, job } from './fixtures';
import hostile from './hostile_job.json';

const NOW = 5000;
const P = (field: string): string => hostile.payload.replace(/FIELD/g, field);
/** Elements that run, load, style or post something (none is ever made from a field). */
const ACTIVE = new Set(
  ('script img iframe frame object embed style link meta base form input textarea animate set ' +
    'use image foreignobject math template').split(' ')
);

/** No element that runs, loads or posts anything, and no event-handler attribute. */
function expectInert(root: Element): void {
  const all = Array.from(root.querySelectorAll('*'));
  expect(all.filter(n => ACTIVE.has(n.localName.toLowerCase())).map(n => n.outerHTML)).toEqual([]);
  const handlers = all.flatMap(node =>
    Array.from(node.attributes)
      .filter(a => a.name.toLowerCase().startsWith('on'))
      .map(a => `${node.localName} ${a.name}`)
  );
  expect(handlers).toEqual([]);
}

const q = (root: Element, selector: string) => root.querySelector(selector) as HTMLElement;

describe('hostile fields', () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => {
    jest.useRealTimers();
    document.body.innerHTML = '';
  });

  it('are text in every sidebar row, queue bar, banner and the status bar', async () => {
    const client = new FakeClient();
    const feed = new AviflowFeed(client, { now: () => NOW });
    const sidebar = new AviflowSidebar({ feed, openJob: () => undefined });
    const status = new AviflowStatus(feed, () => undefined);
    const queued = job({
      id: P('id'),
      name: P('name'),
      user: P('user'),
      team: P('team'),
      queue: P('queue'),
      state: 'QUEUED',
      queuePosition: 1,
      message: P('message'),
      submitted: 4900
    });
    const failed = job({
      id: P('id 2'),
      name: P('name 2'),
      state: 'FAILED',
      submitted: 4000,
      finished: 4100,
      failure: {
        rank: 3,
        attempt: 1,
        exception: P('exception'),
        message: P('failure message')
      }
    });
    client.jobsReplies.push(
      answer([queued, failed], 2, NOW),
      new AviflowError(500, 'BackendError', P('error'))
    );
    client.queuesReplies.push({ queues: [hostile.queue as unknown as QueueQuota] });
    Widget.attach(sidebar, document.body);
    Widget.attach(status, document.body);
    await flush();

    expectInert(document.body);
    const rows = Array.from(sidebar.node.querySelectorAll<HTMLElement>('.aviflow-job'));
    expect(rows.map(r => r.dataset.jobId)).toEqual([P('id'), P('id 2')]);
    expect(q(rows[0], '.aviflow-job-name').textContent).toBe(P('name'));
    expect(q(rows[0], '.aviflow-job-reason').textContent).toBe(P('message'));
    expect(q(rows[0], '.aviflow-job-reason').title).toBe(P('message'));
    expect(rows[0].title).toBe(`${P('name')} (${P('id')}) · queue ${P('queue')}`);
    expect(rows[0].getAttribute('aria-label')).toBe(`${P('name')}, queued`);
    expect(q(rows[1], '.aviflow-job-failure').textContent).toBe(
      `rank 3 failed: ${P('exception')}: ${P('failure message')}`
    );
    const bar = q(sidebar.node, '.aviflow-queue');
    expect(bar.dataset.queue).toBe(hostile.queue.queue);
    expect(q(bar, '.aviflow-queue-name').textContent).toBe(`${hostile.queue.queue} (${hostile.queue.team})`);
    expect(hostile.queue.queue).toBe(P('quota queue'));

    await feed.refresh().catch(() => undefined); // the next read fails with a hostile message
    await flush();
    expectInert(document.body);
    expect(q(sidebar.node, '.aviflow-error-message').textContent).toBe(P('error'));
    expect(status.node.title).toBe(`Aviflow: ${P('error')}`);
    sidebar.dispose();
    status.dispose();
    feed.dispose();
  });

  it('are text in the job view: the server sections, the title, the log and errors', async () => {
    const client = new FakeClient();
    const detail = hostile.detail as unknown as JobDetailAnswer;
    client.jobReplies.push(detail, new AviflowError(500, 'BackendError', P('error')));
    client.logReplies.push({ rank: 0, text: P('log line'), offset: 0, next: 10, size: 10 });
    const view = new JobViewContent({ client, jobId: 'j1', confirmCancel: () => Promise.resolve(false) });
    Widget.attach(view, document.body);
    await flush(20);

    expectInert(view.node);
    const text = view.node.textContent ?? '';
    expect(hostile.detailFields.filter(field => !text.includes(P(field)))).toEqual([]);
    expect(view.title.label).toBe(P('job name'));
    expect(view.title.caption).toBe(`${P('job name')} (${P('job id')}): failed`);
    expect(q(view.node, '.aviflow-name').textContent).toBe(P('job name'));
    const cells = Array.from(view.node.querySelectorAll('tr.aviflow-checkpoint td')).map(td => td.textContent);
    expect(cells).toEqual([P('checkpoint step'), P('checkpoint attempt'), P('checkpoint time')]);
    expect(view.node.querySelector('svg.aviflow-chart')!.getAttribute('data-metric')).toBe(P('metric key'));
    expect(q(view.node, 'pre.aviflow-log-text').textContent).toBe(P('log line'));

    await view.refresh().catch(() => undefined);
    expectInert(view.node);
    expect(q(view.node, '.aviflow-error').textContent).toBe(P('error'));
    view.dispose();
  });

  it('stay inert in the job view even if the server did not escape them', async () => {
    const raw = [
      '<img src=x onerror=alert(1)><script>alert(2)</script>',
      '<svg><animate attributeName="href" to="javascript:alert(3)"/><set attributeName="onload" to="alert(4)"/>',
      '<use href="data:image/svg+xml,<svg onload=alert(5)>"/><foreignObject><img src=x></foreignObject>',
      '<a href="java&#9;script:alert(6)"><text>t</text></a><image href="x" onerror="alert(7)"/></svg>',
      '<a href=" JaVaScRiPt:alert(8)">a</a><a href="data:text/html,<script>alert(9)</script>">b</a>',
      '<iframe srcdoc="<script>alert(10)</script>"></iframe><object data="x"></object><embed src="x">',
      '<form action="https://evil.example"><button formaction="javascript:alert(11)">go</button></form>',
      '<style>body{display:none}</style><link rel=stylesheet href="//evil.example/x.css">',
      '<div style="background:url(//evil.example/t.png)" id="aviflow-sidebar" name="x">d</div>',
      '<math><mi xlink:href="javascript:alert(12)">m</mi></math><template><img src=x></template>',
      '<details open ontoggle=alert(13)>e</details><!-- <img src=x onerror=alert(14)> -->'
    ].join('');
    const client = new FakeClient();
    const detail = hostile.detail as unknown as JobDetailAnswer;
    const html = { header: raw, failure: raw, charts: raw, ranks: raw, checkpoints: raw };
    client.jobReplies.push({ job: detail.job, html });
    client.logReplies.push({ rank: 0, text: raw, offset: 0, next: 10, size: 10 });
    const view = new JobViewContent({ client, jobId: 'j1', confirmCancel: () => Promise.resolve(false) });
    Widget.attach(view, document.body);
    await flush(20);

    expectInert(view.node);
    const sections = q(view.node, '.aviflow-jobview-sections');
    expect(sections.querySelectorAll('[id], [name], [style], button, select').length).toBe(0);
    const links = Array.from(sections.querySelectorAll('a')).map(a => a.getAttribute('href'));
    expect(links).toEqual(Array(15).fill(null)); // 3 links per section, no target kept
    expect(q(sections, '[data-section="header"]').textContent).toBe('tabd');
    expect(q(view.node, 'pre.aviflow-log-text').textContent).toBe(raw);
    view.dispose();
  });
});

describe('sanitizeHtml', () => {
  it('keeps what the server sections are made of, exactly', () => {
    const box = document.createElement('div');
    const section =
      "<div class='aviflow-header' data-state='RUNNING'><b class='aviflow-name'>n</b> " +
      "<span style='color:white'>s</span><table><tbody><tr data-step='2'><td>2</td></tr></tbody></table>" +
      "<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 3 3' width='3'><text x='1' y='2' " +
      "font-size='12' fill='#111'>t</text><polyline points='1,2 3,4' stroke-width='1.5'/></svg>" +
      "<a href='https://example.org/x'>h</a><a href='#y'>i</a></div>";
    box.appendChild(sanitizeHtml(section));
    const again = document.createElement('div');
    again.innerHTML = section;
    expect(box.innerHTML).toBe(again.innerHTML);
  });
});
