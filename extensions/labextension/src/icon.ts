import { LabIcon } from '@jupyterlab/ui-components';

/** A stylized flow: three nodes joined by a rising path. Theme-colored through jp-icon3. */
const SVG = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <circle cx="5" cy="18" r="2.5"/>
    <circle cx="12" cy="9" r="2.5"/>
    <circle cx="19" cy="5" r="2.5"/>
    <path d="M5.9 16.2l5-6.8 1.6 1.2-5 6.8zM12.6 8.1l5.6-3.9 1.1 1.6-5.6 3.9z"/>
    <rect x="3" y="21" width="18" height="1.6" rx="0.8"/>
  </g>
</svg>`;

export const aviflowIcon = new LabIcon({ name: 'aviflow:icon', svgstr: SVG });
