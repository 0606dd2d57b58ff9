/**
 * The Aviflow extension for JupyterLab 4 and Notebook 7: a sidebar of the caller's jobs and
 * team queues, a main-area view per job, a status-bar item, a launcher card and palette
 * entries. Every optional service (launcher, palette, status bar, restorer, file browser)
 * may be missing: Notebook 7 lacks some of them.
 */
import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { IDefaultFileBrowser } from '@jupyterlab/filebrowser';
import { ILauncher } from '@jupyterlab/launcher';
import { IStatusBar } from '@jupyterlab/statusbar';

import { confirmAndCancel, JobViews, newTrainingNotebook, pickJob } from './actions';
import { httpClient } from './api';
import { AviflowFeed } from './feed';
import { aviflowIcon } from './icon';
import { AviflowSidebar } from './sidebar';
import { AviflowStatus } from './statusbar';

/** The command ids. */
export namespace CommandIDs {
  export const openSidebar = 'aviflow:open-sidebar';
  export const refresh = 'aviflow:refresh';
  export const openJob = 'aviflow:open-job';
  export const cancelJob = 'aviflow:cancel-job';
  export const newTrainingJob = 'aviflow:new-training-job';
}

const PALETTE_CATEGORY = 'Aviflow';

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'aviflow-jupyterlab:plugin',
  description: 'The Aviflow sidebar: your training jobs and your team queues.',
  autoStart: true,
  optional: [ILayoutRestorer, ICommandPalette, ILauncher, IStatusBar, IDefaultFileBrowser],
  activate: (
    app: JupyterFrontEnd,
    restorer: ILayoutRestorer | null,
    palette: ICommandPalette | null,
    launcher: ILauncher | null,
    statusBar: IStatusBar | null,
    fileBrowser: IDefaultFileBrowser | null
  ) => {
    const { commands, shell } = app;
    const feed = new AviflowFeed(httpClient());
    const views = new JobViews(app, feed, aviflowIcon);

    const sidebar = new AviflowSidebar({
      feed,
      openJob: id => void commands.execute(CommandIDs.openJob, { id })
    });
    sidebar.title.icon = aviflowIcon;
    shell.add(sidebar, 'left', { rank: 900 });
    restorer?.add(sidebar, sidebar.id);

    document.addEventListener('visibilitychange', () => {
      feed.setDocumentHidden(document.hidden);
    });
    feed.setDocumentHidden(document.hidden);

    commands.addCommand(CommandIDs.openSidebar, {
      label: 'Show Aviflow jobs',
      caption: 'Show the Aviflow sidebar: your jobs and your team queues',
      icon: aviflowIcon,
      execute: () => shell.activateById(sidebar.id)
    });

    commands.addCommand(CommandIDs.refresh, {
      label: 'Refresh Aviflow jobs',
      caption: 'Read your Aviflow jobs and queues now',
      execute: async () => {
        views.tracker.forEach(widget => void widget.content.refresh());
        await feed.refresh();
      }
    });

    commands.addCommand(CommandIDs.openJob, {
      label: 'Open Aviflow job',
      caption: 'Open the view of one of your Aviflow jobs',
      icon: aviflowIcon,
      execute: async args => {
        const id = (args.id as string) || (await pickJob(feed, 'Open Aviflow job', false));
        if (id) {
          return views.open(id, args.activate !== false);
        }
      }
    });

    commands.addCommand(CommandIDs.cancelJob, {
      label: 'Cancel Aviflow job',
      caption: 'Cancel one of your unfinished Aviflow jobs (asks first)',
      execute: async args => {
        const id = (args.id as string) || (await pickJob(feed, 'Cancel Aviflow job', true));
        if (!id) {
          return false;
        }
        const job = feed.model.get(id);
        const target = { id, name: job?.name ?? id, state: job?.state ?? '' };
        const cancelled = await confirmAndCancel(feed.client, target);
        if (cancelled) {
          void views.find(id)?.content.refresh();
          void feed.refresh();
        }
        return cancelled;
      }
    });

    commands.addCommand(CommandIDs.newTrainingJob, {
      label: 'New training job',
      caption: 'Create a notebook with a template %%aviflow_train cell',
      icon: aviflowIcon,
      execute: () => newTrainingNotebook(app, feed.client, fileBrowser?.model.path ?? '')
    });

    if (palette) {
      for (const command of Object.values(CommandIDs)) {
        palette.addItem({ command, category: PALETTE_CATEGORY });
      }
    }

    launcher?.add({ command: CommandIDs.newTrainingJob, category: 'Aviflow', rank: 0 });

    if (restorer) {
      void restorer.restore(views.tracker, {
        command: CommandIDs.openJob,
        args: widget => ({ id: widget.content.jobId, activate: false }),
        name: widget => widget.content.jobId
      });
    }

    if (statusBar) {
      const item = new AviflowStatus(
        feed,
        () => void commands.execute(CommandIDs.openSidebar),
        aviflowIcon.element({ tag: 'span', height: '14px', width: '14px' })
      );
      statusBar.registerStatusItem('aviflow-jupyterlab:status', {
        item,
        align: 'left',
        rank: 100
      });
      feed.setBackgroundPolling(true);
    }

    // A sidebar restored as the open panel is shown before this line; one that is not
    // shown leaves only the status bar's slow poll (or none).
    feed.setSidebarVisible(sidebar.isVisible);
  }
};

export default plugin;
