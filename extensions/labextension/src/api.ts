/**
 * Requests to the Aviflow server extension, over the notebook server's own connection
 * (same origin, Jupyter's login and XSRF handling).
 *
 *     const jobs = await requestAPI<JobsAnswer>('jobs?since=0');
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import { AviflowError, UNREACHABLE_MESSAGE } from './errors';
import type {
  AviflowClient,
  CancelAnswer,
  ExampleAnswer,
  JobDetailAnswer,
  JobsAnswer,
  LogAnswer,
  LogRead,
  QueuesAnswer
} from './types';

/** A function that reads `aviflow/<path>` and returns its JSON answer. */
export type RequestFn = <T>(path: string, init?: RequestInit) => Promise<T>;

/**
 * Call `aviflow/<path>` on the notebook server and return the JSON answer.
 *
 * Throws an AviflowError: with the status, `error` and `message` of a non-2xx answer, or
 * status 0 when the notebook server cannot be reached.
 */
export async function requestAPI<T>(path: string, init: RequestInit = {}): Promise<T> {
  const settings = ServerConnection.makeSettings();
  const url = URLExt.join(settings.baseUrl, 'aviflow', path);
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, init, settings);
  } catch (error) {
    throw new AviflowError(0, 'NetworkError', UNREACHABLE_MESSAGE);
  }
  const text = await response.text();
  let body: any = null;
  if (text) {
    try {
      body = JSON.parse(text);
    } catch {
      body = null;
    }
  }
  if (!response.ok) {
    throw errorFromAnswer(response.status, response.statusText, path, body);
  }
  return body as T;
}

/** The AviflowError for a non-2xx answer and its (possibly absent) JSON body. */
export function errorFromAnswer(
  status: number,
  statusText: string,
  path: string,
  body: any
): AviflowError {
  if (body && typeof body === 'object' && typeof body.message === 'string') {
    const errorClass = typeof body.error === 'string' ? body.error : `HTTP${status}`;
    return new AviflowError(status, errorClass, body.message);
  }
  if (status === 404) {
    return new AviflowError(
      404,
      'ExtensionNotFound',
      `The Aviflow server extension does not answer on this notebook server (HTTP 404 for aviflow/${path}). ` +
        'Check that aviflow_jupyter is installed and enabled.'
    );
  }
  return new AviflowError(
    status,
    `HTTP${status}`,
    `The notebook server answered HTTP ${status}${statusText ? ' ' + statusText : ''} for aviflow/${path}.`
  );
}

/** The AviflowClient over HTTP. */
export function httpClient(request: RequestFn = requestAPI): AviflowClient {
  const job = (id: string) => `jobs/${encodeURIComponent(id)}`;
  return {
    jobs: (since: number) => request<JobsAnswer>(`jobs?since=${since}`),
    queues: () => request<QueuesAnswer>('queues'),
    job: (id: string) => request<JobDetailAnswer>(job(id)),
    logs: (id: string, rank: number, read: LogRead) => {
      const query = 'tail' in read ? `tail=${read.tail}` : `offset=${read.offset}`;
      return request<LogAnswer>(`${job(id)}/logs/${rank}?${query}`);
    },
    cancel: (id: string) => request<CancelAnswer>(`${job(id)}/cancel`, { method: 'POST' }),
    example: () => request<ExampleAnswer>('example')
  };
}
