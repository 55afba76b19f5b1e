// Sandbox actions shared by the table and a sandbox's page; destructive ones ask first.
import { post, del, enc } from './api.js';
import { confirm, ask } from './dialog.svelte.js';
import { refresh } from './live.svelte.js';

export async function park(id) {
  await post(`/v1/sandboxes/${enc(id)}/park`);
  await refresh();
}

export async function wake(id) {
  await post(`/v1/sandboxes/${enc(id)}/wake`);
  await refresh();
}

export async function fork(id) {
  const count = await ask(`Fork ${id}`, 'How many copies (processes included)?', 1, { ok: 'Fork', type: 'number' });
  if (count === null) return null;
  const made = await post(`/v1/sandboxes/${enc(id)}/fork`, { count: Number(count) });
  await refresh();
  return made.sandboxes;
}

export async function snapshot(id) {
  const name = await ask(`Snapshot ${id}`, 'Name of the snapshot (new sandboxes can start from it):', '', { ok: 'Snapshot' });
  if (!name) return null;
  const made = await post(`/v1/sandboxes/${enc(id)}/snapshots`, { name: name.trim() });
  await refresh();
  return made;
}

export async function kill(id) {
  if (!(await confirm(`Kill ${id}?`, 'Its processes, memory and files are gone for good.', { ok: 'Kill' }))) return false;
  await del(`/v1/sandboxes/${enc(id)}`);
  await refresh();
  return true;
}
