/** How much of a rank's log the job view reads and keeps. */

/** Lines read from the end of a log when a rank is chosen. */
export const LOG_TAIL_LINES = 200;

/**
 * Characters of a rank's log the view keeps (256 KiB of plain output): older output is
 * dropped from the top, cut at a line start, and a note says so. When more than this was
 * written since the last read, the view reads on from the part it would keep.
 */
export const LOG_KEEP_CHARS = 256 * 1024;

/** Log reads one poll makes at most (each answer is at most 1 MiB of the log). */
export const LOG_READS_PER_POLL = 4;

/** What the note above a log says when earlier output is not shown. */
export const LOG_DROPPED_NOTE =
  'Earlier output is not shown: this view keeps the last 256 KiB of each rank\'s log.';

/**
 * The end of `text` the view keeps: all of it when it has at most `keep` characters, else
 * what follows the first line start among its last `keep` (the last `keep` characters when
 * they hold no line start: one line longer than that).
 */
export function keepLogTail(text: string, keep: number = LOG_KEEP_CHARS): string {
  if (text.length <= keep) {
    return text;
  }
  const from = text.length - keep;
  if (text[from - 1] === '\n') {
    return text.slice(from);
  }
  const newline = text.indexOf('\n', from);
  return newline < 0 || newline + 1 === text.length ? text.slice(from) : text.slice(newline + 1);
}
