/**
 * The "Aviflow" sidebar: the caller's team queues as bars and their jobs, newest first.
 * It renders the AviflowFeed it is given and updates the DOM in place: rows are keyed by
 * job id and only the fields that changed are written.
 */
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { el } from './dom';
import { AviflowFeed } from './feed';
import { JobRowView } from './model';
import { QueueBar, queueBar } from './queuebar';
import type { QueueQuota } from './types';

export const EMPTY_HINT =
  'No jobs yet. Run a cell with %%aviflow_train, or use "New training job" in the launcher.';

/** The text fields of a row, each in its own element, in display order. */
const ROW_FIELDS: ReadonlyArray<{ key: keyof JobRowView; cls: string; line: 'meta' | 'note' }> = [
  { key: 'size', cls: 'aviflow-job-size', line: 'meta' },
  { key: 'elapsed', cls: 'aviflow-job-elapsed', line: 'meta' },
  { key: 'gpuHours', cls: 'aviflow-job-gpuh', line: 'meta' },
  { key: 'position', cls: 'aviflow-job-position', line: 'note' },
  { key: 'start', cls: 'aviflow-job-start', line: 'note' },
  { key: 'reason', cls: 'aviflow-job-reason', line: 'note' },
  { key: 'wait', cls: 'aviflow-job-wait', line: 'note' },
  { key: 'failure', cls: 'aviflow-job-failure', line: 'note' }
];

export interface SidebarOptions {
  feed: AviflowFeed;
  /** Open a job (the app runs the `aviflow:open-job` command). */
  openJob: (id: string) => void;
}

interface Row {
  node: HTMLElement;
  view: JobRowView | null;
}

export class AviflowSidebar extends Widget {
  readonly feed: AviflowFeed;
  private _openJob: (id: string) => void;
  private _rows = new Map<string, Row>();
  private _queueNodes = new Map<string, HTMLElement>();
  private _errorNode: HTMLElement;
  private _errorMessage: HTMLElement;
  private _identityNode: HTMLElement;
  private _queueList: HTMLElement;
  private _queuesEmpty: HTMLElement;
  private _jobList: HTMLElement;
  private _jobsEmpty: HTMLElement;

  constructor(options: SidebarOptions) {
    super();
    this.feed = options.feed;
    this._openJob = options.openJob;
    this.id = 'aviflow-sidebar';
    this.addClass('aviflow-sidebar');
    this.title.caption = 'Aviflow';

    const header = el('div', 'aviflow-sidebar-header');
    header.appendChild(el('h2', 'aviflow-sidebar-title', 'Aviflow'));
    this._identityNode = el('span', 'aviflow-identity');
    header.appendChild(this._identityNode);
    const refresh = el('button', 'aviflow-refresh jp-Button', 'Refresh');
    refresh.type = 'button';
    refresh.title = 'Read jobs and queues now';
    refresh.addEventListener('click', () => void this.feed.refresh());
    header.appendChild(refresh);

    this._errorNode = el('div', 'aviflow-error');
    this._errorNode.setAttribute('role', 'alert');
    this._errorMessage = el('span', 'aviflow-error-message');
    this._errorNode.append(this._errorMessage, ' ', el('span', 'aviflow-error-retry', 'retrying…'));
    this._errorNode.hidden = true;

    const queues = el('section', 'aviflow-section aviflow-queues');
    queues.appendChild(el('h3', 'aviflow-section-title', "My team's queues"));
    this._queueList = el('div', 'aviflow-queue-list');
    this._queuesEmpty = el('p', 'aviflow-empty aviflow-queues-empty', 'Loading…');
    queues.append(this._queueList, this._queuesEmpty);

    const jobs = el('section', 'aviflow-section aviflow-jobs');
    jobs.appendChild(el('h3', 'aviflow-section-title', 'My jobs'));
    this._jobList = el('ul', 'aviflow-job-list');
    this._jobList.addEventListener('click', this._onClick);
    this._jobList.addEventListener('keydown', this._onKeyDown);
    this._jobsEmpty = el('p', 'aviflow-empty aviflow-jobs-empty', 'Loading…');
    jobs.append(this._jobList, this._jobsEmpty);

    this.node.append(header, this._errorNode, queues, jobs);
    this.feed.changed.connect(this.render, this);
    this.render();
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.feed.changed.disconnect(this.render, this);
    this.feed.setSidebarVisible(false);
    super.dispose();
  }

  /** Bring the DOM up to date with the feed (cheap when nothing changed). */
  render(): void {
    this._renderError();
    this._renderIdentity();
    this._renderQueues(this.feed.queues);
    this._renderJobs(this.feed.model.rows(this.feed.now()));
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this.feed.setSidebarVisible(true);
  }

  protected onAfterHide(msg: Message): void {
    super.onAfterHide(msg);
    this.feed.setSidebarVisible(false);
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    if (this.isVisible) {
      this.feed.setSidebarVisible(true);
    }
  }

  protected onBeforeDetach(msg: Message): void {
    this.feed.setSidebarVisible(false);
    super.onBeforeDetach(msg);
  }

  private _renderError(): void {
    const error = this.feed.error;
    this._errorNode.hidden = error === null;
    const text = error ? error.message : '';
    if (this._errorMessage.textContent !== text) {
      this._errorMessage.textContent = text;
    }
    this._errorNode.dataset.error = error ? error.errorClass : '';
  }

  private _renderIdentity(): void {
    const model = this.feed.model;
    const text = model.loaded && model.backend ? `${model.user} · ${model.backend} backend` : '';
    if (this._identityNode.textContent !== text) {
      this._identityNode.textContent = text;
    }
  }

  private _renderQueues(queues: readonly QueueQuota[]): void {
    const seen = new Set<string>();
    let position = 0;
    for (const queue of queues) {
      seen.add(queue.queue);
      let node = this._queueNodes.get(queue.queue);
      if (!node) {
        node = this._createQueue();
        this._queueNodes.set(queue.queue, node);
      }
      this._updateQueue(node, queue, queueBar(queue));
      if (this._queueList.children[position] !== node) {
        this._queueList.insertBefore(node, this._queueList.children[position] ?? null);
      }
      position += 1;
    }
    for (const [name, node] of this._queueNodes) {
      if (!seen.has(name)) {
        node.remove();
        this._queueNodes.delete(name);
      }
    }
    const empty = queues.length === 0;
    this._queuesEmpty.hidden = !empty;
    this._queuesEmpty.textContent = this.feed.queuesLoaded ? 'No team queues.' : 'Loading…';
  }

  private _createQueue(): HTMLElement {
    const node = el('div', 'aviflow-queue');
    const head = el('div', 'aviflow-queue-head');
    head.append(el('span', 'aviflow-queue-name'), el('span', 'aviflow-queue-label'));
    const bar = el('div', 'aviflow-queue-bar');
    bar.setAttribute('role', 'img');
    for (const segment of ['inquota', 'borrowed', 'pending']) {
      const seg = el('span', `aviflow-queue-seg aviflow-queue-seg-${segment}`);
      seg.dataset.segment = segment;
      bar.appendChild(seg);
    }
    bar.appendChild(el('span', 'aviflow-queue-quota-mark'));
    node.append(head, bar);
    return node;
  }

  private _updateQueue(node: HTMLElement, q: QueueQuota, bar: QueueBar): void {
    const data: Record<string, string> = {
      queue: q.queue,
      inUse: String(q.gpusInUse),
      pending: String(q.pendingCount),
      quota: q.gpuQuota === null ? '' : String(q.gpuQuota),
      borrowed: String(q.borrowed),
      lendable: String(q.lendable ?? 0)
    };
    for (const [key, value] of Object.entries(data)) {
      if (node.dataset[key] !== value) {
        node.dataset[key] = value;
      }
    }
    setText(node.querySelector('.aviflow-queue-name')!, q.team ? `${q.queue} (${q.team})` : q.queue);
    setText(node.querySelector('.aviflow-queue-label')!, bar.label);
    const barNode = node.querySelector('.aviflow-queue-bar') as HTMLElement;
    barNode.setAttribute('aria-label', `${q.queue}: ${bar.label}`);
    const widths: Record<string, number> = {
      inquota: bar.inQuotaPct,
      borrowed: bar.borrowedPct,
      pending: bar.pendingPct
    };
    for (const seg of Array.from(barNode.querySelectorAll<HTMLElement>('.aviflow-queue-seg'))) {
      setWidth(seg, widths[seg.dataset.segment!]);
    }
    const mark = node.querySelector('.aviflow-queue-quota-mark') as HTMLElement;
    mark.hidden = bar.quotaPct === null;
    if (bar.quotaPct !== null) {
      const left = `${bar.quotaPct}%`;
      if (mark.style.left !== left) {
        mark.style.left = left;
      }
    }
  }

  private _renderJobs(views: JobRowView[]): void {
    const seen = new Set<string>();
    views.forEach((view, position) => {
      seen.add(view.id);
      let row = this._rows.get(view.id);
      if (!row) {
        row = { node: this._createRow(view.id), view: null };
        this._rows.set(view.id, row);
      }
      this._updateRow(row, view);
      if (this._jobList.children[position] !== row.node) {
        this._jobList.insertBefore(row.node, this._jobList.children[position] ?? null);
      }
    });
    for (const [id, row] of this._rows) {
      if (!seen.has(id)) {
        row.node.remove();
        this._rows.delete(id);
      }
    }
    this._jobsEmpty.hidden = views.length > 0;
    this._jobsEmpty.textContent = this.feed.model.loaded ? EMPTY_HINT : 'Loading…';
  }

  private _createRow(id: string): HTMLElement {
    const node = el('li', 'aviflow-job');
    node.dataset.jobId = id;
    node.tabIndex = 0;
    node.setAttribute('role', 'button');
    const top = el('div', 'aviflow-job-top');
    top.append(el('span', 'aviflow-job-name'), el('span', 'aviflow-badge'));
    node.append(top, el('div', 'aviflow-job-meta'));
    return node;
  }

  private _updateRow(row: Row, view: JobRowView): void {
    const old = row.view;
    const node = row.node;
    if (old && sameView(old, view)) {
      return;
    }
    if (!old || old.state !== view.state) {
      node.dataset.state = view.state;
      const badge = node.querySelector('.aviflow-badge') as HTMLElement;
      badge.dataset.state = view.state;
      badge.textContent = view.stateText;
    }
    if (!old || old.name !== view.name) {
      setText(node.querySelector('.aviflow-job-name')!, view.name);
    }
    if (!old || old.title !== view.title) {
      node.title = view.title;
      node.setAttribute('aria-label', `${view.name}, ${view.stateText}`);
    }
    const meta = node.querySelector('.aviflow-job-meta') as HTMLElement;
    for (const field of ROW_FIELDS) {
      const text = view[field.key];
      if (old && old[field.key] === text) {
        continue;
      }
      let child = node.querySelector(`.${field.cls}`) as HTMLElement | null;
      if (!text) {
        child?.remove();
        continue;
      }
      if (!child) {
        const parent = field.line === 'meta' ? meta : node;
        child = el(field.line === 'meta' ? 'span' : 'div', field.cls);
        parent.insertBefore(child, nextField(parent, field.cls));
      }
      child.textContent = text;
      if (field.line === 'note') {
        child.title = text;
      }
    }
    row.view = view;
  }

  private _rowOf(target: EventTarget | null): HTMLElement | null {
    const node = target instanceof Element ? target.closest('.aviflow-job') : null;
    return node instanceof HTMLElement && this._jobList.contains(node) ? node : null;
  }

  private _onClick = (event: MouseEvent): void => {
    const row = this._rowOf(event.target);
    if (row?.dataset.jobId) {
      this._openJob(row.dataset.jobId);
    }
  };

  private _onKeyDown = (event: KeyboardEvent): void => {
    if (event.key !== 'Enter' && event.key !== ' ') {
      return;
    }
    const row = this._rowOf(event.target);
    if (row?.dataset.jobId) {
      event.preventDefault();
      this._openJob(row.dataset.jobId);
    }
  };
}

/** The child of `parent` a field must precede to keep ROW_FIELDS order. */
function nextField(parent: HTMLElement, cls: string): Element | null {
  const later = ROW_FIELDS.slice(ROW_FIELDS.findIndex(f => f.cls === cls) + 1).map(f => f.cls);
  return Array.from(parent.children).find(child => later.some(c => child.classList.contains(c))) ?? null;
}

function sameView(a: JobRowView, b: JobRowView): boolean {
  return (Object.keys(a) as (keyof JobRowView)[]).every(key => a[key] === b[key]);
}

function setText(node: Element, text: string): void {
  if (node.textContent !== text) {
    node.textContent = text;
  }
}

function setWidth(node: HTMLElement, percent: number): void {
  const width = `${percent}%`;
  if (node.style.width !== width) {
    node.style.width = width;
  }
}
