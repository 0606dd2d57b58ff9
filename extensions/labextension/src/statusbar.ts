/**
 * The status-bar item: "2 running · 1 queued" from the shared feed ("Aviflow" before the
 * first answer, "Aviflow unavailable" when there is none); a click shows the sidebar.
 */
import { Widget } from '@lumino/widgets';

import { AviflowFeed } from './feed';

export class AviflowStatus extends Widget {
  private _text: HTMLElement;

  constructor(
    readonly feed: AviflowFeed,
    private _onClick: () => void,
    icon?: HTMLElement
  ) {
    super();
    this.id = 'aviflow-status';
    this.addClass('aviflow-status');
    this.node.setAttribute('role', 'button');
    this.node.tabIndex = 0;
    if (icon) {
      icon.classList.add('aviflow-status-icon');
      this.node.appendChild(icon);
    }
    this._text = document.createElement('span');
    this._text.className = 'aviflow-status-text';
    this.node.appendChild(this._text);
    this.node.addEventListener('click', this._onClick);
    this.node.addEventListener('keydown', event => {
      if (event.key === 'Enter') {
        this._onClick();
      }
    });
    feed.changed.connect(this.render, this);
    this.render();
  }

  /** The text the item shows. */
  static text(feed: AviflowFeed): string {
    if (!feed.model.loaded) {
      return feed.error ? 'Aviflow unavailable' : 'Aviflow';
    }
    return feed.model.statusText();
  }

  render(): void {
    const text = AviflowStatus.text(this.feed);
    if (this._text.textContent !== text) {
      this._text.textContent = text;
    }
    const error = this.feed.error;
    this.node.dataset.error = error ? error.errorClass : '';
    this.node.title = error
      ? `Aviflow: ${error.message}`
      : 'Your Aviflow jobs (click to show the Aviflow sidebar)';
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.feed.changed.disconnect(this.render, this);
    super.dispose();
  }
}
