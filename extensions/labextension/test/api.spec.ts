import { errorFromAnswer } from '../src/api';

// requestAPI itself needs the browser's PageConfig; its error mapping is tested here.
jest.mock('@jupyterlab/coreutils', () => ({ URLExt: {} }));
jest.mock('@jupyterlab/services', () => ({ ServerConnection: {} }));

describe('errorFromAnswer', () => {
  it('carries the status, error class and message of the JSON body', () => {
    const error = errorFromAnswer(503, 'Service Unavailable', 'jobs?since=0', {
      error: 'BackendUnavailable',
      message: 'aviflow-api cannot be reached.'
    });
    expect([error.status, error.errorClass, error.message]).toEqual([
      503,
      'BackendUnavailable',
      'aviflow-api cannot be reached.'
    ]);
  });

  it('names a missing server extension on a bare 404', () => {
    const error = errorFromAnswer(404, 'Not Found', 'jobs?since=0', null);
    expect(error.errorClass).toBe('ExtensionNotFound');
    expect(error.message).toBe(
      'The Aviflow server extension does not answer on this notebook server (HTTP 404 for aviflow/jobs?since=0). ' +
        'Check that aviflow_jupyter is installed and enabled.'
    );
  });

  it('falls back to the HTTP status', () => {
    const error = errorFromAnswer(502, 'Bad Gateway', 'queues', null);
    expect(error.errorClass).toBe('HTTP502');
    expect(error.message).toBe('The notebook server answered HTTP 502 Bad Gateway for aviflow/queues.');
  });
});

describe('httpClient', () => {
  it('reads the documented paths', async () => {
    const { httpClient } = await import('../src/api');
    const seen: string[] = [];
    const client = httpClient(<T>(path: string, init?: RequestInit) => {
      seen.push(`${init?.method ?? 'GET'} ${path}`);
      return Promise.resolve({} as T);
    });
    await client.jobs(17);
    await client.queues();
    await client.job('j 1');
    await client.logs('j1', 3, { tail: 200 });
    await client.logs('j1', 3, { offset: 4096 });
    await client.cancel('j1');
    await client.example();
    expect(seen).toEqual([
      'GET jobs?since=17',
      'GET queues',
      'GET jobs/j%201',
      'GET jobs/j1/logs/3?tail=200',
      'GET jobs/j1/logs/3?offset=4096',
      'POST jobs/j1/cancel',
      'GET example'
    ]);
  });
});
