// The console's one way to the daemon: the ordinary /v1 API, authenticated by the session
// cookie; every change carries the session's CSRF token. Errors become ApiError with the
// daemon's own message, which the pages show as they are.

let csrf = null;

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function failure(response) {
  let code = 'http_' + response.status;
  let message = `the daemon answered ${response.status} ${response.statusText}`;
  try {
    const body = await response.json();
    code = body.code || code;
    message = body.message || message;
  } catch {
    /* not JSON */
  }
  if (response.status === 401) window.dispatchEvent(new CustomEvent('corral:logged-out'));
  return new ApiError(response.status, code, message);
}

export async function request(method, path, { json, body, headers = {} } = {}) {
  const init = { method, headers: { ...headers }, credentials: 'same-origin' };
  if (method !== 'GET' && method !== 'HEAD' && csrf) init.headers['X-Corral-CSRF'] = csrf;
  if (json !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(json);
  } else if (body !== undefined) {
    init.body = body;
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (error) {
    throw new ApiError(0, 'network', `cannot reach the daemon (${error.message})`);
  }
  if (!response.ok) throw await failure(response);
  return response;
}

export async function api(method, path, json) {
  const response = await request(method, path, { json });
  if (response.status === 204) return null;
  const type = response.headers.get('content-type') || '';
  return type.includes('json') ? response.json() : response.text();
}

export const get = (path) => api('GET', path);
export const post = (path, json) => api('POST', path, json ?? {});
export const put = (path, json) => api('PUT', path, json);
export const del = (path) => api('DELETE', path);

// A streamed answer of one JSON object a line (builds, process output).
export async function* ndjson(method, path, json) {
  const response = await request(method, path, { json });
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffered = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffered += decoder.decode(value, { stream: true });
    let newline;
    while ((newline = buffered.indexOf('\n')) >= 0) {
      const line = buffered.slice(0, newline).trim();
      buffered = buffered.slice(newline + 1);
      if (line) yield JSON.parse(line);
    }
  }
  if (buffered.trim()) yield JSON.parse(buffered);
}

export async function currentSession() {
  try {
    const session = await get('/console/api/session');
    csrf = session.csrf;
    return session;
  } catch (error) {
    if (error.status === 401) return null;
    throw error;
  }
}

export async function logIn(credentials) {
  const session = await api('POST', '/console/api/session', credentials);
  csrf = session.csrf;
  return session;
}

export async function logOut() {
  await del('/console/api/session');
  csrf = null;
}

export const enc = encodeURIComponent;

// A 404 for a route this daemon does not have (an older daemon), not for a missing object.
export const isMissingRoute = (error) => error?.status === 404 && error.message === 'Not Found';
