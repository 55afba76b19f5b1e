// What the pages show live: the sandboxes, the capacity and the recent events.
// The daemon's event stream (GET /v1/events, server-sent) drives it where the daemon has one;
// a poll of the sandbox list keeps it right in any case (and, without the stream, also makes
// the events, from the state changes it sees).
import { get } from './api.js';

const MAX_EVENTS = 200;

export const live = $state({
  sandboxes: [],
  capacity: null,
  events: [],
  streaming: false,
  error: null,
  loaded: false,
});

let timer = null;
let source = null;
let refreshing = null;
let known = new Map();

function note(event) {
  live.events = [{ at: Date.now() / 1000, ...event }, ...live.events].slice(0, MAX_EVENTS);
}

export async function refresh() {
  if (refreshing) return refreshing;
  refreshing = (async () => {
    try {
      const [listed, capacity] = await Promise.all([
        get('/v1/sandboxes?all=true'),
        get('/v1/capacity'),
      ]);
      const next = new Map(listed.sandboxes.map((s) => [s.id, s]));
      if (live.loaded && !live.streaming) {
        for (const [id, s] of next) {
          const before = known.get(id);
          if (!before) note({ type: 'created', sandbox_id: id, state: s.state });
          else if (before.state !== s.state)
            note({ type: s.state, sandbox_id: id, state: s.state, was: before.state });
        }
      }
      known = next;
      live.sandboxes = listed.sandboxes;
      live.capacity = capacity;
      live.error = null;
      live.loaded = true;
    } catch (error) {
      live.error = error.message;
    } finally {
      refreshing = null;
    }
  })();
  return refreshing;
}

function listen() {
  try {
    source = new EventSource('/v1/events');
  } catch {
    return;
  }
  const onEvent = (message) => {
    // The stream's own 'error' (a dropped connection) is an Event without data, not a change.
    if (!(message instanceof MessageEvent)) return;
    live.streaming = true;
    let event;
    try {
      event = JSON.parse(message.data);
    } catch {
      event = { type: message.type, data: message.data };
    }
    event.type = event.type || event.kind || (message.type !== "message" ? message.type : "event");
    note(event);
    refresh();
  };
  source.onmessage = onEvent;
  for (const name of ['sandbox', 'created', 'running', 'parked', 'woken', 'forked', 'killed',
    'stopped', 'error', 'build', 'template', 'snapshot', 'state']) {
    source.addEventListener(name, onEvent);
  }
  source.onopen = () => (live.streaming = true);
  source.onerror = () => {
    // No stream on this daemon (or it went away): the poll carries on alone.
    if (source.readyState === EventSource.CLOSED) live.streaming = false;
  };
}

export function start() {
  if (timer) return;
  refresh();
  listen();
  // Without the event stream every 2 s; with it, changes come as events and the poll is only
  // a check every 15 s.
  let ticks = 0;
  timer = setInterval(() => {
    ticks += 1;
    if (document.visibilityState === 'hidden') return;
    if (!live.streaming || ticks % 8 === 0) refresh();
  }, 2000);
}

export function stop() {
  clearInterval(timer);
  timer = null;
  source?.close();
  source = null;
  live.loaded = false;
  known = new Map();
}
