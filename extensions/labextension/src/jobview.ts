/**
 * The main-area view of one job. It shows the notebook panel's own server-rendered
 * sections (`html` of `GET aviflow/jobs/<id>`, kept to what they are made of by
 * `sanitizeHtml`), then the per-rank logs (as text), read
 * incrementally. It polls every 2 s while visible and the job is unfinished (or the server
 * is still catching up with what it logged), and once more after that. A log keeps only its
 * last `LOG_KEEP_CHARS` in the DOM, however long the job runs. The MainAreaWidget around it
 * is made in actions.ts.
 */
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { el } from './dom';
import { AviflowError } from './errors';
import { isFinished } from './model';
import {
  keepLogTail,
  LOG_DROPPED_NOTE,
  LOG_KEEP_CHARS,
  LOG_READS_PER_POLL,
  LOG_TAIL_LINES
} from './logtail';
import { Poller } from './poller';
import { sanitizeHtml } from './sanitize';
import type { AviflowClient, JobDetail, JobDetailAnswer, JobDetailHtml } from './types';

export {
  keepLogTail,
  LOG_DROPPED_NOTE,
  LOG_KEEP_CHARS,
  LOG_READS_PER_POLL,
  LOG_TAIL_LINES
} from './logtail';
export { sanitizeHtml } from './sanitize';

/** The server-rendered sections, in display order. */
export const HTML_SECTIONS: ReadonlyArray<keyof JobDetailHtml> = [
  'header',
  'failure',
  'charts',
  'ranks',
  'checkpoints'
];

/** What a cancel confirmation needs to know. */
export interface CancelTarget {
  id: string;
  name: string;
  state: string;
}

export interface JobViewOptions {
  client: AviflowClient;
  jobId: string;
  /** Ask before cancelling; resolves true to go ahead. */
  confirmCancel: (job: CancelTarget) => Promise<boolean>;
  /** Called after a cancel request went through (e.g. to refresh the sidebar). */
  onCancelled?: (id: string) => void;
  interval?: number;
}

export class JobViewContent extends Widget {
  readonly jobId: string;
  private _client: AviflowClient;
  private _confirmCancel: (job: CancelTarget) => Promise<boolean>;
  private _onCancelled: (id: string) => void;
  private _poller: Poller;
  private _job: JobDetail | null = null;
  private _html: JobDetailHtml = {};
  private _sawFinished = false;
  private _done = false;
  private _errorNode: HTMLElement;
  private _loadingNode: HTMLElement;
  private _cancelButton: HTMLButtonElement;
  private _sections = new Map<string, HTMLElement>();
  private _rankSelect: HTMLSelectElement;
  private _logText: HTMLPreElement;
  private _logNode: Text;
  private _logDropped: HTMLElement;
  private _logMidLine = false;
  private _logRanks: number[] = [];
  private _logRank: number | null = null;
  private _logNext: number | null = null;
  private _logToken = 0;
  private _logChain: Promise<void> = Promise.resolve();

  constructor(options: JobViewOptions) {
    super();
    this.jobId = options.jobId;
    this._client = options.client;
    this._confirmCancel = options.confirmCancel;
    this._onCancelled = options.onCancelled ?? (() => undefined);
    this.addClass('aviflow-jobview-content');
    this.node.dataset.jobId = this.jobId;
    this.node.tabIndex = -1;

    const actions = el('div', 'aviflow-jobview-actions');
    const refresh = el('button', 'aviflow-refresh jp-Button', 'Refresh');
    refresh.type = 'button';
    refresh.addEventListener('click', () => void this.refresh());
    this._cancelButton = el('button', 'aviflow-cancel jp-Button', 'Cancel job');
    this._cancelButton.type = 'button';
    this._cancelButton.hidden = true;
    this._cancelButton.addEventListener('click', () => void this.cancel());
    actions.append(refresh, this._cancelButton);

    this._errorNode = el('div', 'aviflow-error');
    this._errorNode.setAttribute('role', 'alert');
    this._errorNode.hidden = true;
    this._loadingNode = el('p', 'aviflow-empty aviflow-jobview-loading', 'Loading job…');

    const sections = el('div', 'aviflow-jobview-sections');
    for (const name of HTML_SECTIONS) {
      const section = el('div', `aviflow-jobview-section aviflow-jobview-${name}`);
      section.dataset.section = name;
      section.hidden = true;
      this._sections.set(name, section);
      sections.appendChild(section);
    }

    const logs = el('section', 'aviflow-logs');
    const head = el('div', 'aviflow-logs-head');
    const label = el('label', 'aviflow-log-rank-label', 'Logs of ');
    this._rankSelect = el('select', 'aviflow-log-rank jp-mod-styled');
    this._rankSelect.disabled = true;
    this._rankSelect.addEventListener('change', () => {
      this._selectRank(Number(this._rankSelect.value));
    });
    label.appendChild(this._rankSelect);
    head.append(el('h3', 'aviflow-section-title', 'Logs'), label);
    this._logText = el('pre', 'aviflow-log-text');
    this._logNode = document.createTextNode('No logs yet.');
    this._logText.appendChild(this._logNode);
    this._logDropped = el('p', 'aviflow-log-dropped', LOG_DROPPED_NOTE);
    this._logDropped.hidden = true;
    logs.append(head, this._logDropped, this._logText);

    this.node.append(actions, this._errorNode, this._loadingNode, sections, logs);

    this._poller = new Poller({
      task: () => this._tick(),
      interval: options.interval ?? 2000,
      maxBackoff: 30000,
      name: 'aviflow:job'
    });
  }

  /** The job as last read, null before the first answer. */
  get job(): JobDetail | null {
    return this._job;
  }

  /** Whether polling stopped for good (the job finished and was read once more). */
  get done(): boolean {
    return this._done;
  }

  get poller(): Poller {
    return this._poller;
  }

  /** Read the job (and the selected log) now. */
  refresh(): Promise<void> {
    return this._poller.refresh();
  }

  /** Ask, then cancel the job and read it again. */
  async cancel(): Promise<void> {
    const job = this._job;
    const target = { id: this.jobId, name: job?.name ?? this.jobId, state: job?.state ?? '' };
    if (!(await this._confirmCancel(target))) {
      return;
    }
    try {
      await this._client.cancel(this.jobId);
      this._showError(null);
      this._onCancelled(this.jobId);
    } catch (error) {
      this._showError(AviflowError.from(error));
    }
    this._done = false;
    this._sawFinished = false;
    await this.refresh();
    if (this.isVisible && !this._done) {
      this._poller.resume();
    }
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._poller.dispose();
    super.dispose();
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    if (!this._done) {
      this._poller.resume();
    }
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    if (this.isVisible && !this._done) {
      this._poller.resume();
    }
  }

  protected onAfterHide(msg: Message): void {
    super.onAfterHide(msg);
    this._poller.pause();
  }

  protected onBeforeDetach(msg: Message): void {
    this._poller.pause();
    super.onBeforeDetach(msg);
  }

  protected onActivateRequest(msg: Message): void {
    this.node.focus();
  }

  private async _tick(): Promise<void> {
    if (typeof document !== 'undefined' && document.hidden) {
      return;
    }
    let answer: JobDetailAnswer;
    try {
      answer = await this._client.job(this.jobId);
    } catch (error) {
      const err = AviflowError.from(error);
      this._showError(err);
      if (err.status === 404 || err.status === 403) {
        this._stop();
      }
      throw err;
    }
    this._showError(null);
    this._render(answer);
    await this._readLogs();
    if (isFinished(answer.job.state) && !answer.job.catchingUp) {
      if (this._sawFinished) {
        this._stop();
      }
      this._sawFinished = true;
    }
  }

  private _stop(): void {
    this._done = true;
    this._poller.pause();
  }

  private _showError(error: AviflowError | null): void {
    this._errorNode.hidden = error === null;
    this._errorNode.textContent = error ? error.message : '';
    this._errorNode.dataset.error = error ? error.errorClass : '';
  }

  private _render(answer: JobDetailAnswer): void {
    const job = answer.job;
    this._job = job;
    this._loadingNode.hidden = true;
    this.node.dataset.state = job.state;
    this.title.label = job.name;
    this.title.caption = `${job.name} (${job.id}): ${job.state.toLowerCase()}`;
    this._cancelButton.hidden = isFinished(job.state);
    const html = answer.html ?? {};
    for (const name of HTML_SECTIONS) {
      const value = html[name] ?? '';
      if (this._html[name] === value) {
        continue;
      }
      const section = this._sections.get(name)!;
      section.replaceChildren(sanitizeHtml(value));
      section.hidden = value === '';
    }
    this._html = { ...html };
    this._updateRanks(job.logRanks ?? []);
  }

  private _updateRanks(ranks: number[]): void {
    if (ranks.join(',') !== this._logRanks.join(',')) {
      this._logRanks = [...ranks];
      this._rankSelect.replaceChildren(
        ...ranks.map(rank => {
          const option = el('option', '', `rank ${rank}`);
          option.value = String(rank);
          return option;
        })
      );
      this._rankSelect.disabled = ranks.length === 0;
    }
    if (this._logRank === null || !ranks.includes(this._logRank)) {
      this._logRank = ranks.length ? ranks[0] : null;
      this._logNext = null;
      this._logToken += 1;
    }
    if (this._logRank !== null) {
      this._rankSelect.value = String(this._logRank);
    }
  }

  private _selectRank(rank: number): void {
    if (rank === this._logRank) {
      return;
    }
    this._logRank = rank;
    this._logNext = null;
    this._logToken += 1;
    this._setLog('', false);
    void this._readLogs();
  }

  /** Show `text` as the log; `dropped`: it is not the log from its start. */
  private _setLog(text: string, dropped: boolean): void {
    const kept = keepLogTail(text);
    this._logNode = document.createTextNode(kept);
    this._logText.replaceChildren(this._logNode);
    this._logDropped.hidden = !(dropped || kept.length < text.length);
    this._logMidLine = false;
  }

  /** Add `text` to the log, dropping its oldest lines past LOG_KEEP_CHARS. */
  private _appendLog(text: string): void {
    if (this._logMidLine) {
      // reading on from the middle of a line: its rest is dropped
      const newline = text.indexOf('\n');
      if (newline < 0) {
        return;
      }
      text = text.slice(newline + 1);
      this._logMidLine = false;
    }
    const node = this._logNode;
    node.appendData(text);
    if (node.length > LOG_KEEP_CHARS) {
      node.deleteData(0, node.length - keepLogTail(node.data).length);
      this._logDropped.hidden = false;
    }
  }

  /**
   * Read the selected rank's log: its tail first, then what follows, up to
   * LOG_READS_PER_POLL answers while the log has more (from the part the view keeps when
   * more than that was written). Reads never overlap.
   */
  private _readLogs(): Promise<void> {
    this._logChain = this._logChain.then(() => this._readLogsOnce()).catch(() => undefined);
    return this._logChain;
  }

  private async _readLogsOnce(): Promise<void> {
    const rank = this._logRank;
    if (rank === null) {
      return;
    }
    const token = this._logToken;
    const pre = this._logText;
    const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    for (let reads = 0; reads < LOG_READS_PER_POLL; reads++) {
      const offset = this._logNext;
      const read = offset === null ? { tail: LOG_TAIL_LINES } : { offset };
      const answer = await this._client.logs(this.jobId, rank, read);
      if (token !== this._logToken) {
        return;
      }
      if (offset === null) {
        this._setLog(answer.text, answer.offset > 0);
      } else if (answer.next < offset) {
        // The log was truncated or replaced: read its tail again next time.
        this._logNext = null;
        return;
      } else if (answer.text) {
        this._appendLog(answer.text);
      }
      this._logNext = answer.next;
      if (answer.next >= answer.size) {
        break;
      }
      if (answer.size - answer.next > LOG_KEEP_CHARS) {
        // More was written than the view keeps: read on from its last part only.
        this._logNext = answer.size - LOG_KEEP_CHARS;
        this._setLog('', true);
        this._logMidLine = true;
      }
    }
    if (atBottom) {
      pre.scrollTop = pre.scrollHeight;
    }
  }
}
