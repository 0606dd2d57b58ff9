/**
 * The one error type of the extension: what the server extension answered (status, its
 * `error` class and `message`), or that the notebook server could not be reached
 * (status 0).
 */
export class AviflowError extends Error {
  constructor(
    /** The HTTP status; 0 when no answer came back. */
    readonly status: number,
    /** The server's error class, e.g. `BackendUnavailable`, `JobNotFound`. */
    readonly errorClass: string,
    message: string
  ) {
    super(message);
    this.name = 'AviflowError';
  }

  /** Wrap anything thrown into an AviflowError (keeping one that already is). */
  static from(error: unknown): AviflowError {
    if (error instanceof AviflowError) {
      return error;
    }
    const message = error instanceof Error ? error.message : String(error);
    return new AviflowError(0, 'Error', message);
  }
}

/** The message for a request that got no answer at all. */
export const UNREACHABLE_MESSAGE =
  'The notebook server cannot be reached. Check your connection, or that the server is still running.';
