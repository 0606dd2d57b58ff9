// jsdom has no DragEvent, which @lumino/dragdrop subclasses when it loads.
if (typeof window !== 'undefined' && typeof window.DragEvent === 'undefined') {
  window.DragEvent = class DragEvent extends window.MouseEvent {};
}
