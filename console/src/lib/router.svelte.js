// Routes live after the '#': /console/#/sandboxes/sb-1 (the daemon serves one page).
export const route = $state({ path: '/', parts: [], query: new URLSearchParams() });

function parse() {
  const hash = location.hash.replace(/^#/, '') || '/';
  const [path, query = ''] = hash.split('?');
  route.path = path;
  route.parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  route.query = new URLSearchParams(query);
}

parse();
window.addEventListener('hashchange', parse);

export function go(path) {
  location.hash = '#' + path;
}
