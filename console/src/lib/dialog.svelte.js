// One modal at a time: confirm (destructive actions) and ask (a value), as promises.
export const dialog = $state({ open: false, title: '', message: '', input: null, danger: false, ok: 'OK' });
let settle = null;

export function confirm(title, message, { ok = 'Confirm', danger = true } = {}) {
  return show({ title, message, input: null, danger, ok }).then((v) => v !== null);
}

export function ask(title, message, value = '', { ok = 'OK', type = 'text' } = {}) {
  return show({ title, message, input: { value: String(value), type }, danger: false, ok });
}

function show(options) {
  settle?.(null);
  Object.assign(dialog, options, { open: true });
  return new Promise((resolve) => (settle = resolve));
}

export function close(value) {
  dialog.open = false;
  const done = settle;
  settle = null;
  done?.(value);
}
