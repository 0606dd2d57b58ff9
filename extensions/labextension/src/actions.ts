/**
 * What the commands do, on top of JupyterLab's dialogs, main area and contents service:
 * confirm and cancel a job, open a job view (once per job), create the training notebook.
 */
import { JupyterFrontEnd } from '@jupyterlab/application';
import {
  Dialog,
  InputDialog,
  MainAreaWidget,
  showDialog,
  showErrorMessage,
  WidgetTracker
} from '@jupyterlab/apputils';
import { LabIcon } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import { AviflowError } from './errors';
import { AviflowFeed } from './feed';
import { CancelTarget, JobViewContent } from './jobview';
import { isFinished } from './model';
import type { AviflowClient } from './types';

/** Ask "Cancel job <name>?"; resolves true when the user chose "Cancel job". */
export async function confirmCancel(job: CancelTarget): Promise<boolean> {
  const result = await showDialog({
    title: `Cancel job ${job.name}?`,
    body: `Job ${job.id}${job.state ? ` is ${job.state.toLowerCase()}` : ''}. Cancelling stops all of its ranks.`,
    buttons: [Dialog.cancelButton({ label: 'Keep running' }), Dialog.warnButton({ label: 'Cancel job' })]
  });
  return result.button.accept;
}

/** Ask, then cancel a job; errors are shown in a dialog. Resolves true when cancelled. */
export async function confirmAndCancel(client: AviflowClient, job: CancelTarget): Promise<boolean> {
  if (!(await confirmCancel(job))) {
    return false;
  }
  try {
    await client.cancel(job.id);
    return true;
  } catch (error) {
    await showErrorMessage(`Cannot cancel job ${job.name}`, AviflowError.from(error).message);
    return false;
  }
}

/**
 * Let the user pick one of their jobs (for palette entries run without an `id`).
 * Resolves null when dismissed or when there is nothing to pick.
 */
export async function pickJob(
  feed: AviflowFeed,
  title: string,
  unfinishedOnly: boolean
): Promise<string | null> {
  if (!feed.model.loaded) {
    await feed.refresh();
  }
  const jobs = feed.model.jobs.filter(job => !unfinishedOnly || !isFinished(job.state));
  if (jobs.length === 0) {
    await showDialog({
      title,
      body: unfinishedOnly ? 'You have no unfinished jobs.' : 'You have no jobs yet.',
      buttons: [Dialog.okButton()]
    });
    return null;
  }
  const items = jobs.map(job => `${job.name} (${job.id}) · ${job.state.toLowerCase()}`);
  const result = await InputDialog.getItem({ title, items, current: 0 });
  if (!result.button.accept || result.value === null) {
    return null;
  }
  const index = items.indexOf(result.value);
  return index >= 0 ? jobs[index].id : null;
}

/** The open job views: one per job, restored across reloads. */
export class JobViews {
  readonly tracker = new WidgetTracker<MainAreaWidget<JobViewContent>>({
    namespace: 'aviflow-job'
  });

  constructor(
    private _app: JupyterFrontEnd,
    private _feed: AviflowFeed,
    private _icon: LabIcon
  ) {}

  /** The open view of a job, if any. */
  find(id: string): MainAreaWidget<JobViewContent> | undefined {
    return this.tracker.find(widget => widget.content.jobId === id);
  }

  /** Open the view of a job, or activate it when it is already open. */
  open(id: string, activate = true): MainAreaWidget<JobViewContent> {
    let widget = this.find(id);
    if (!widget) {
      const content = new JobViewContent({
        client: this._feed.client,
        jobId: id,
        confirmCancel,
        onCancelled: () => void this._feed.refresh()
      });
      widget = new MainAreaWidget({ content });
      widget.id = `aviflow-job-${id}`;
      widget.addClass('aviflow-jobview');
      widget.toolbar.hide(); // the view's own action row holds Refresh and Cancel
      widget.title.label = this._feed.model.get(id)?.name ?? id;
      widget.title.icon = this._icon;
      widget.title.closable = true;
      content.title.changed.connect(() => {
        widget!.title.label = content.title.label;
        widget!.title.caption = content.title.caption;
      });
      void this.tracker.add(widget);
      addToMainArea(this._app, widget);
    }
    if (activate) {
      this._app.shell.activateById(widget.id);
    }
    return widget;
  }
}

/**
 * Add a widget to the main area. Notebook 7's main area holds the page's one document and
 * ignores more, so there the view goes to the right side panel (which activating it opens;
 * its panel below the document stays collapsed).
 */
function addToMainArea(app: JupyterFrontEnd, widget: Widget): void {
  for (const area of ['main', 'right', 'down'] as const) {
    app.shell.add(widget, area as any, { rank: 900 });
    if (widget.isAttached || widget.parent) {
      return;
    }
  }
}

/**
 * Create a notebook from the server's example (a template `%%aviflow_train` cell) in
 * directory `dir` and open it. Resolves the new notebook's path.
 */
export async function newTrainingNotebook(
  app: JupyterFrontEnd,
  client: AviflowClient,
  dir: string
): Promise<string | null> {
  try {
    const example = await client.example();
    const contents = app.serviceManager.contents;
    const model = await contents.newUntitled({ type: 'notebook', path: dir });
    await contents.save(model.path, {
      type: 'notebook',
      format: 'json',
      content: example.notebook
    });
    await app.commands.execute('docmanager:open', { path: model.path, factory: 'Notebook' });
    return model.path;
  } catch (error) {
    await showErrorMessage('Cannot create the training notebook', AviflowError.from(error).message);
    return null;
  }
}
