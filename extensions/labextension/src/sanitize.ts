/**
 * The job view's second line of defence: the server's section HTML (aviflow/views/sections.py,
 * escaped there) kept to what it is made of before it enters the DOM. Tested with planted
 * fields in test/hostile.spec.ts.
 */

/**
 * The elements the server's sections are made of (aviflow/views/sections.py: text, tables and
 * inline SVG charts); anything else is dropped with its content.
 */
const ALLOWED_ELEMENTS = new Set([
  'a', 'b', 'br', 'code', 'div', 'em', 'h1', 'h2', 'h3', 'h4', 'h5', 'h6', 'hr', 'i', 'li',
  'ol', 'p', 'pre', 'small', 'span', 'strong', 'sub', 'sup', 'table', 'tbody', 'td', 'tfoot',
  'th', 'thead', 'tr', 'ul',
  // SVG
  'svg', 'g', 'text', 'tspan', 'title', 'rect', 'line', 'polyline', 'polygon', 'path', 'circle'
]);

/** Their attributes (lower case), besides `data-*` and `aria-*`; `href` only with a safe URL. */
const ALLOWED_ATTRIBUTES = new Set([
  'class', 'style', 'title', 'role', 'colspan', 'rowspan', 'href',
  // SVG presentation and geometry
  'xmlns', 'width', 'height', 'viewbox', 'x', 'y', 'x1', 'y1', 'x2', 'y2', 'cx', 'cy', 'r',
  'd', 'points', 'fill', 'stroke', 'stroke-width', 'font-size', 'font-family', 'font-weight',
  'text-anchor', 'dominant-baseline', 'transform', 'opacity'
]);

/** Whether a link target is relative, a fragment, or http(s)/mailto (never `javascript:`). */
function safeUrl(value: string): boolean {
  // browsers ignore control characters and whitespace inside a scheme ("java\tscript:")
  const bare = value.replace(/[\u0000-\u0020\u007f-\u009f]/g, '').toLowerCase();
  const scheme = /^([a-z][a-z0-9+.-]*):/.exec(bare);
  return scheme === null || ['http', 'https', 'mailto'].includes(scheme[1]);
}

function allowedAttribute(name: string, value: string): boolean {
  if (name.startsWith('data-') || name.startsWith('aria-')) {
    return true;
  }
  if (!ALLOWED_ATTRIBUTES.has(name)) {
    return false; // event handlers, src, srcdoc, action, formaction, xlink:href, id, name...
  }
  if (name === 'href') {
    return safeUrl(value);
  }
  if (name === 'style') {
    return !/url\s*\(|expression\s*\(|@import|\\/i.test(value); // no fetches, no CSS escapes
  }
  return true;
}

function clean(parent: Node): void {
  for (const node of Array.from(parent.childNodes)) {
    if (node.nodeType === Node.TEXT_NODE) {
      continue;
    }
    const element = node as Element;
    if (node.nodeType !== Node.ELEMENT_NODE || !ALLOWED_ELEMENTS.has(element.localName.toLowerCase())) {
      node.parentNode!.removeChild(node); // comments too
      continue;
    }
    for (const attr of Array.from(element.attributes)) {
      if (!allowedAttribute(attr.name.toLowerCase(), attr.value)) {
        element.removeAttributeNode(attr);
      }
    }
    clean(element);
  }
}

/**
 * The server's section HTML, with only what it is made of kept: the elements and attributes
 * above. Scripts, styles, frames, images, forms, SVG animation and `<use>` are dropped with
 * their content; event handlers, `id`/`name` and links to anything but http(s) are removed.
 * The server escapes whatever a job or a user wrote; this is the second line. Parsed in an
 * inert template, so nothing loads or runs while it is cleaned.
 */
export function sanitizeHtml(html: string): DocumentFragment {
  const template = document.createElement('template');
  template.innerHTML = html;
  const content = template.content;
  clean(content);
  return content;
}
