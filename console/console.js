// The Slipway console: one page over the public API, as the signed-in caller.
//
// No framework and no build step. Text from the server reaches the page only as text nodes (the
// `h` helper below never parses HTML), links are built from `#/` and encoded names, and the server
// sends a Content-Security-Policy that allows this script and nothing else. The client secret used
// to sign in goes to the token endpoint and is forgotten; the access token is kept in this tab's
// sessionStorage until it expires or the user signs out, which revokes it. Secret values are on
// screen only after an explicit reveal and are never stored.

import { parseDotenv } from './dotenv.js';

const config = await fetch('config.json', { cache: 'no-store' }).then((res) => res.json());
const TOKEN_KEY = 'slipway.console.token';
/** Why the sign-in page is shown, when it was not the user's choice (shown on it). */
let signInReason = null;
/** How many times a view was drawn: a view, its timers and its answers stop once another has been. */
let renders = 0;
const $main = document.getElementById('main');
const $nav = document.getElementById('org-nav');
const $who = document.getElementById('who');
const $notice = document.getElementById('notice');
const $dismiss = document.getElementById('notice-dismiss');
const $announce = document.getElementById('announce');

// ---------------------------------------------------------------------------------------------
// DOM helpers
// ---------------------------------------------------------------------------------------------

/** An element with attributes, listeners (`onclick`…) and children (strings become text nodes). */
function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on') && typeof value === 'function') el.addEventListener(key.slice(2), value);
    else if (key === 'class') el.className = value;
    // A property, not the attribute: a textarea's text, a field's current value.
    else if (key === 'value') el.value = value;
    else el.setAttribute(key, value === true ? '' : String(value));
  }
  return fill(el, ...children);
}

/**
 * Text as shown: the characters that reorder what follows them (bidirectional overrides and
 * isolates) are shown as their code points instead of obeyed, so that a log line or a description
 * cannot make itself read as something else.
 */
const BIDI_CONTROLS = /[\u202a-\u202e\u2066-\u2069]/g;
const shown = (text) => text.replace(BIDI_CONTROLS, (c) => `<U+${c.codePointAt(0).toString(16).toUpperCase()}>`);

/** Replaces an element's children; nothing, null and false are left out. */
function fill(el, ...children) {
  el.replaceChildren(...children.flat(Infinity)
    .filter((child) => child !== undefined && child !== null && child !== false)
    .map((child) => (child instanceof Node ? child : shown(String(child)))));
  return el;
}

/** Goes to a view; the one already shown is drawn again (a filter sent unchanged refreshes its list). */
function navigate(hash) {
  if (location.hash === hash) render();
  else location.hash = hash;
}

/** A link inside the console: `#/` followed by encoded path segments. */
function link(text, ...segments) {
  return h('a', { href: `#/${segments.map((s) => encodeURIComponent(s)).join('/')}` }, text);
}

function when(iso) {
  if (!iso) return '—';
  const date = new Date(iso);
  return h('time', { datetime: iso, title: iso }, date.toLocaleString());
}

function badge(text, kind = text) {
  return h('span', { class: `badge ${kind}` }, text.replace('_', ' '));
}

/**
 * A box that shows less than it holds (a table wider than the page, a long spec) is reached with
 * Tab while it does, so that the keyboard scrolls it as a mouse would, and is named for a screen
 * reader; one that shows everything is no stop on the way.
 */
const overflowWatch = new ResizeObserver((entries) => { for (const entry of entries) followOverflow(entry.target.closest('[data-scrolls]')); });
function followOverflow(box) {
  if (box === null) return;
  const overflows = box.scrollWidth > box.clientWidth + 1 || box.scrollHeight > box.clientHeight + 1;
  if (overflows && !box.hasAttribute('tabindex')) {
    box.tabIndex = 0;
    box.setAttribute('role', 'region');
    box.setAttribute('aria-label', box.dataset.scrolls || `${headingBefore(box)}: table, scrolls sideways`);
  } else if (!overflows && box.getAttribute('tabindex') === '0') {
    for (const name of ['tabindex', 'role', 'aria-label']) box.removeAttribute(name);
  }
}
/** The text of the heading nearest before `box` in the page: what a table there is a table of. */
function headingBefore(box) {
  for (let el = box; el !== null && el !== document.body; el = el.parentElement) {
    for (let before = el.previousElementSibling; before !== null; before = before.previousElementSibling) {
      if (/^H[1-6]$/.test(before.tagName)) return before.textContent;
    }
  }
  return document.title;
}
/** `name`: what it is called, or nothing for a table named after its heading once in the page. */
function scrollsByKeyboard(box, name) {
  box.dataset.scrolls = name;
  overflowWatch.observe(box);
  if (box.firstElementChild) overflowWatch.observe(box.firstElementChild);
  return box;
}

/** A table in a box of its own that scrolls sideways when the table is wider than the page. */
function table(headings, rows, empty = 'Nothing here yet.') {
  if (rows.length === 0) return h('p', { class: 'muted' }, empty);
  return scrollsByKeyboard(h('div', { class: 'table-scroll' },
    // A column of buttons has no heading to show, and one to read: Actions.
    h('table', {}, h('thead', {}, h('tr', {}, headings.map((t) => h('th', {}, t || h('span', { class: 'visually-hidden' }, 'Actions'))))), h('tbody', {}, rows))), '');
}
const isTable = (el) => el.classList.contains('table-scroll');

// What an action did is said in #notice, and what changed by itself (a deployment's state) in
// #announce, out of sight: both are status regions that are always in the page, empty when they have
// nothing to say, so that a screen reader reads what is put in them (a region shown at the same
// time as its text is not read out by all of them).
// A notice stays until it is dismissed or another page is drawn: no time limit to read it in.
let noticeAt = 0;
function notify(text) {
  noticeAt = Date.now();
  $notice.textContent = shown(text);
  $dismiss.hidden = false;
}
function clearNotice() {
  $notice.replaceChildren();
  $dismiss.hidden = true;
}
$dismiss.addEventListener('click', () => {
  const hadFocus = document.activeElement === $dismiss;
  clearNotice();
  // The button is gone: the keyboard goes on from the page's heading, not from the top.
  if (hadFocus) focusPage();
});
function announce(text) {
  $announce.textContent = shown(text);
}

function json(value, name = 'JSON') {
  return scrollsByKeyboard(h('pre', {}, JSON.stringify(value, null, 2)), name);
}

// ---------------------------------------------------------------------------------------------
// Session and API
// ---------------------------------------------------------------------------------------------

function session() {
  try {
    const saved = JSON.parse(sessionStorage.getItem(TOKEN_KEY) ?? 'null');
    if (saved && saved.expiresAt > Date.now() + 5_000) return saved;
    if (saved) signInReason = 'Your session has ended: its token expired. Sign in again.';
  } catch { /* a damaged entry is no session */ }
  sessionStorage.removeItem(TOKEN_KEY);
  return null;
}

/** What a token says of its caller, for display only: the API decides what the caller may do. */
function claimsOf(token) {
  try {
    const part = token.split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
    return JSON.parse(atob(part.padEnd(part.length + ((4 - (part.length % 4)) % 4), '=')));
  } catch {
    return {};
  }
}

function startSession(accessToken, expiresIn) {
  caller = NOBODY;
  const claims = claimsOf(accessToken);
  const expiresAt = typeof claims.exp === 'number' ? claims.exp * 1000 : Date.now() + expiresIn * 1000;
  sessionStorage.setItem(TOKEN_KEY, JSON.stringify({ accessToken, expiresAt, subject: claims.sub ?? claims.client_id ?? 'unknown' }));
}

/**
 * Ends the tab's session and shows the sign-in page. A session that ended by itself (its token
 * expired or was revoked) keeps the page's address, so that signing in again comes back to it; one
 * signed out on purpose goes back to the start, for whoever signs in next.
 */
function signOut(reason, { keepPage = true } = {}) {
  sessionStorage.removeItem(TOKEN_KEY);
  knownOrgs.clear();
  caller = NOBODY;
  signInReason = reason ?? null;
  if (!keepPage && location.hash !== '#/') location.hash = '#/';
  else render();
}

// Who the tab's token acts as, and its role now (GET /v1/token), read on every sign-in, on the pages
// drawn after 30 seconds, every 30 seconds while one stays open, and after a refusal of a role too
// low: the console offers only the changes that role may make. The API decides all the same. A
// server without the route (an older one) leaves everything offered, for the API to refuse; one
// that could not answer keeps the role read before, or offers nothing until it can.
const RANK = { runner: 0, viewer: 1, developer: 2, admin: 3, owner: 4 };
const CALLER_FRESH_MS = 30_000;
const NOBODY = { role: null, name: null, instanceAdmin: false, olderServer: false, readAt: 0 };
let caller = NOBODY;

async function readCaller() {
  if (Date.now() - caller.readAt < CALLER_FRESH_MS) return;
  try {
    const me = await api('GET', '/v1/token');
    caller = { role: me.instanceAdmin ? 'owner' : me.role, name: me.name, instanceAdmin: me.instanceAdmin, olderServer: false, readAt: Date.now() };
  } catch (error) {
    if (quiet(error)) throw error;
    if (error instanceof Problem && error.status === 404) caller = { ...NOBODY, olderServer: true, readAt: Date.now() };
    // Asked again on the next page drawn.
    else caller = { ...caller, readAt: 0 };
  }
}

/** Reads the role again now, and draws the page again when it changed (saying so). */
async function followRole() {
  if (session() === null) return;
  const before = caller.role;
  caller = { ...caller, readAt: 0 };
  try {
    await readCaller();
  } catch {
    return; // another page drawn meanwhile, or signed out: it read the role itself
  }
  if (caller.role !== before && before !== null) {
    notify(`Your role here is now ${caller.role}: the page offers what it may do.`);
    carryTypedInto = renders + 1;
    render();
  }
}

setInterval(followRole, CALLER_FRESH_MS);

// What the user typed into a page's forms survives the page being drawn again for a new role: the
// fields the new page still has (the same form, the same name) get it back, and the one being typed
// in keeps the focus and the caret. Only for that redraw: a page visited again starts afresh.
let carryTypedInto = 0;
const $typed = new WeakSet();
for (const type of ['input', 'change']) $main.addEventListener(type, (event) => $typed.add(event.target));

/** The fields of `root`'s forms that the user changed, with what they hold. */
function typedIn(root) {
  return [...root.querySelectorAll('form[id] [name]')].filter((field) => $typed.has(field)).map((field) => ({
    form: field.form?.id,
    name: field.name,
    value: field.value,
    checked: field.checked,
    focused: field === document.activeElement,
    selection: typeof field.selectionStart === 'number' ? [field.selectionStart, field.selectionEnd, field.selectionDirection] : null,
  }));
}

/** Puts `typed` back into `root`'s fields of the same form and name, and the focus with it. */
function putTyped(root, typed) {
  for (const t of typed) {
    const field = t.form ? root.querySelector(`form#${CSS.escape(t.form)} [name="${CSS.escape(t.name)}"]`) : null;
    if (field === null || field.disabled) continue;
    if (field.type === 'checkbox' || field.type === 'radio') field.checked = t.checked;
    else field.value = t.value;
    $typed.add(field);
    if (!t.focused) continue;
    field.focus({ preventScroll: true });
    if (t.selection !== null) {
      try {
        field.setSelectionRange(...t.selection);
      } catch { /* a field type without a caret */ }
    }
  }
}

/** Whether the caller's role is `least` or above (an instance administrator is an owner everywhere). */
const may = (least) => (caller.role === null ? caller.olderServer : RANK[caller.role] >= RANK[least]);
/** `what` when the caller's role may use it, else nothing. */
const offered = (least, what) => (may(least) ? what : null);

/** How long signing out waits for the API to revoke the token before it signs out without. */
const REVOKE_WAIT_MS = 5_000;

/**
 * The user signs out: the API revokes the token first (`DELETE /v1/token`), so that a copy of it
 * left anywhere is worth nothing; then the tab forgets it. A revocation that fails (the network,
 * a token refused already, an external issuer's token) does not keep the user signed in.
 */
async function signOutByUser(button) {
  button.disabled = true;
  const current = session();
  if (current !== null) {
    await fetch(new URL(`${config.apiBase}/v1/token`, location.origin), {
      method: 'DELETE',
      cache: 'no-store',
      credentials: 'omit',
      headers: { accept: 'application/json', authorization: `Bearer ${current.accessToken}` },
      signal: AbortSignal.timeout(REVOKE_WAIT_MS),
    }).catch(() => undefined);
  }
  signOut('Signed out.', { keepPage: false });
}

/** An answer that came after the user moved to another view: nothing is drawn with it. */
class Stale extends Error {}

/** A refusal from the API, as its RFC 9457 problem. */
class Problem extends Error {
  constructor(status, body, { signedOut = false } = {}) {
    super(body?.detail ?? body?.title ?? `HTTP ${status}`);
    this.status = status;
    this.body = body ?? {};
    /** The session ended with it: the sign-in page says why, nothing else needs to. */
    this.signedOut = signedOut;
  }
}

/**
 * No answer at all (the server down or restarting, the network out): said so, with where it was
 * asked, rather than the browser's "Failed to fetch". Its status is 0; nothing was refused.
 */
function unreachable(url, error) {
  return new Problem(0, {
    title: 'Slipway could not be reached',
    detail: `No answer from ${new URL(url).origin} (${error?.message ?? error}): the server may be restarting or stopped, or the network down. Try again in a moment.`,
  });
}

/** `etag`: the answer is `{ data, etag }`, with the ETag the API gave it (to send back as If-Match). */
async function api(method, path, { body, query, headers, etag = false } = {}) {
  const view = renders;
  const current = session();
  if (current === null) {
    signOut('Your session has ended; sign in again.');
    throw new Problem(401, { title: 'Signed out' }, { signedOut: true });
  }
  const url = new URL(`${config.apiBase}${path}`, location.origin);
  for (const [key, value] of Object.entries(query ?? {})) if (value !== undefined && value !== '' && value !== null) url.searchParams.set(key, String(value));
  const res = await fetch(url, {
    method,
    cache: 'no-store',
    credentials: 'omit',
    headers: {
      accept: 'application/json',
      authorization: `Bearer ${current.accessToken}`,
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      ...headers,
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  }).catch((error) => {
    if (view !== renders) throw new Stale();
    throw unreachable(url, error);
  });
  const text = await res.text();
  // Another view has been drawn since this call was made: its answer is not this page's to show.
  if (view !== renders) throw new Stale();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = { detail: text }; }
  if (res.status === 401) {
    signOut(data?.detail ?? 'Your token is no longer accepted; sign in again.');
    throw new Problem(401, data, { signedOut: true });
  }
  if (!res.ok) throw new Problem(res.status, data);
  return etag ? { data, etag: res.headers.get('etag') } : data;
}

/** What is not shown as a problem: an answer for a view left since, a sign-out the sign-in page explains. */
const quiet = (error) => error instanceof Stale || (error instanceof Problem && error.signedOut);

/** A problem shown where it happened: what was refused, why, and each field at fault. */
function problemBox(error) {
  if (!(error instanceof Problem)) return h('div', { class: 'problem', role: 'alert' }, `Something went wrong: ${error?.message ?? error}`);
  const body = error.body;
  return h('div', { class: 'problem', role: 'alert' },
    h('strong', {}, body.title ?? `HTTP ${error.status}`), ' ', body.detail ?? '',
    Array.isArray(body.errors) && body.errors.length > 0
      ? h('ul', {}, body.errors.map((e) => h('li', {}, e.pointer ? `${e.pointer}: ` : '', e.message ?? '')))
      : null,
    // A change made elsewhere since the page was drawn: the API's advice (retry with the new ETag)
    // is the console's to follow, by drawing the page again at the current version.
    error.status === 412
      ? h('p', { class: 'row' }, 'It was changed elsewhere since this page was loaded; nothing was overwritten. Reload to see it as it is now (what you typed here is not kept), then make your change again.',
        h('button', { type: 'button', onclick: () => render() }, 'Reload'))
      : null,
    body.requestId ? h('div', { class: 'muted' }, `Request id ${body.requestId}`) : null);
}

let problems = 0;

/**
 * The fields of `form` that a problem's errors point at (`/name`, `/spec/port`: the field `name`,
 * `spec`) are marked invalid and described by the problem; those of an earlier problem no longer.
 */
function markInvalid(form, box, error) {
  for (const field of form.querySelectorAll('[aria-invalid]')) {
    field.removeAttribute('aria-invalid');
    if (field.dataset.hint) field.setAttribute('aria-describedby', field.dataset.hint);
    else field.removeAttribute('aria-describedby');
  }
  if (box === null || !(error instanceof Problem)) return;
  // The console's own refusals (text that is not JSON, not .env lines) name their field.
  const pointers = [...(Array.isArray(error.body.errors) ? error.body.errors.map((e) => e.pointer) : []), error.body.field && `/${error.body.field}`];
  for (const pointer of pointers) {
    const name = typeof pointer === 'string' && pointer.startsWith('/') ? decodeURIComponent(pointer.split('/')[1] ?? '') : '';
    const field = name ? form.querySelector(`[name="${CSS.escape(name)}"]`) : null;
    if (field === null) continue;
    field.setAttribute('aria-invalid', 'true');
    field.setAttribute('aria-describedby', [field.dataset.hint, box.id].filter(Boolean).join(' '));
  }
}

/**
 * Runs an action from a button or form: disables it meanwhile, and shows its problem beside it
 * (replacing the previous one) instead of losing what the user typed. A refused form, or a refused
 * action whose button had the focus, puts the focus on the problem, where reading goes on; a button
 * that lost the focus while disabled gets it back once its action is done.
 */
async function act(trigger, where, action, form = null) {
  where.querySelectorAll(':scope > .problem').forEach((el) => el.remove());
  const hadFocus = trigger !== null && trigger !== undefined && document.activeElement === trigger;
  if (trigger) trigger.disabled = true;
  try {
    const done = await action();
    if (form) markInvalid(form, null, null);
    return done;
  } catch (error) {
    if (!quiet(error)) {
      const box = problemBox(error);
      box.id = `problem-${++problems}`;
      box.tabIndex = -1;
      where.append(box);
      if (form) markInvalid(form, box, error);
      if (form || hadFocus || document.activeElement === document.body) box.focus({ preventScroll: true });
      // A refusal the user cannot see is no answer: bring it into sight.
      box.scrollIntoView({ block: 'nearest' });
      // A role too low may be a role lowered since it was read.
      if (error instanceof Problem && error.status === 403) followRole();
    }
    return undefined;
  } finally {
    if (trigger) trigger.disabled = false;
    if (hadFocus && trigger.isConnected && (document.activeElement === null || document.activeElement === document.body)) trigger.focus();
  }
}

function onSubmit(form, action) {
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    act(form.querySelector('button[type=submit]'), form.parentElement ?? form, () => action(new FormData(form)), form);
  });
  return form;
}

/** Every item of a list, page after page (for choices such as the environment to deploy into). */
async function everyPage(load, field) {
  const items = [];
  let cursor;
  do {
    const page = await load(cursor);
    items.push(...page[field]);
    cursor = page.nextCursor;
  } while (cursor);
  return items;
}

/** A list that pages on: the first page now, the next ones on "Load more". */
function pagedList(load, renderPage) {
  const box = h('div');
  const more = h('button', { type: 'button' }, 'Load more');
  let cursor;
  const next = async () => {
    // Whoever pressed Load more from the keyboard goes on from the first row it loaded.
    const focused = document.activeElement === more;
    const page = await act(more, box, () => load(cursor));
    if (page === undefined) return;
    more.remove();
    const drawn = renderPage(page);
    // Later pages' rows join the first page's table, under the same headings.
    const table = box.querySelector(':scope > .table-scroll > table > tbody');
    const added = table && isTable(drawn) ? [...drawn.querySelector('tbody').children] : [drawn];
    if (table && isTable(drawn)) table.append(...added);
    else if (!(table && !isTable(drawn))) box.append(drawn);
    cursor = page.nextCursor;
    if (cursor) box.append(more);
    if (focused && added[0] !== undefined) {
      // Its first link or button, or else the first row itself, so that reading and Tab go on from there.
      let target = added.map((el) => el.querySelector('a[href], button, input, select, textarea')).find(Boolean);
      if (target === undefined) {
        target = added[0];
        target.tabIndex = -1;
      }
      target.focus();
    }
  };
  more.addEventListener('click', next);
  next();
  return box;
}

// ---------------------------------------------------------------------------------------------
// Sign in
// ---------------------------------------------------------------------------------------------

function signInView() {
  document.title = 'Sign in · Slipway';
  fill($nav);
  fill($who);
  const sameOrigin = new URL(config.tokenUrl).origin === location.origin;
  const credentials = onSubmit(h('form', { class: 'stack', id: 'signin-credentials' },
    h('label', {}, 'Client id', h('input', { name: 'clientId', required: true, autocomplete: 'username', spellcheck: 'false' })),
    h('label', {}, 'Client secret', h('input', { name: 'clientSecret', type: 'password', required: true, autocomplete: 'current-password' })),
    h('button', { type: 'submit', class: 'primary' }, 'Sign in')), async (form) => {
    const res = await fetch(config.tokenUrl, {
      method: 'POST',
      cache: 'no-store',
      // Without credentials the browser never opens its own password prompt on the endpoint's
      // 401 (`WWW-Authenticate: Basic`); the refusal is shown in the page instead.
      credentials: 'omit',
      headers: { 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' },
      body: new URLSearchParams({
        grant_type: 'client_credentials',
        client_id: String(form.get('clientId')).trim(),
        client_secret: String(form.get('clientSecret')),
        scope: config.scope,
      }),
    }).catch((error) => { throw unreachable(config.tokenUrl, error); });
    const answer = await res.json().catch(() => ({}));
    if (!res.ok) throw new Problem(res.status, { title: 'Sign-in refused', detail: answer.error_description ?? answer.error ?? `HTTP ${res.status}` });
    startSession(answer.access_token, answer.expires_in);
    signInReason = null;
    render();
  });
  const pasted = onSubmit(h('form', { class: 'stack', id: 'signin-token' },
    h('label', {}, 'Access token', h('textarea', { name: 'token', required: true, class: 'code', spellcheck: 'false', rows: 4 })),
    h('button', { type: 'submit' }, 'Use this token')), async (form) => {
    const token = String(form.get('token')).trim();
    startSession(token, 3600);
    signInReason = null;
    render();
  });
  fill($main, h('div', { class: 'signin' },
    h('h1', { tabindex: '-1' }, 'Sign in to Slipway'),
    h('p', { class: 'muted' }, 'With a service user\'s credentials (made under Service users, or bootstrap.json on a first start). The secret is sent to the token endpoint only; the token is kept in this tab until it expires or you sign out, which revokes it.'),
    signInReason ? h('div', { class: 'problem', role: 'alert' }, signInReason) : null,
    sameOrigin
      ? h('div', { class: 'card' }, credentials)
      : h('p', { class: 'muted' }, `Tokens come from ${config.tokenUrl}; get one there and paste it below.`),
    h('details', { class: 'card', open: !sameOrigin }, h('summary', {}, 'Use an access token instead'), pasted)));
  // Signed out from a button the page no longer has: reading and Tab go on from the heading.
  if (document.activeElement === null || document.activeElement === document.body) $main.querySelector('h1').focus({ preventScroll: true });
}

// ---------------------------------------------------------------------------------------------
// Layout
// ---------------------------------------------------------------------------------------------

/** The organization's pages, with the least role that may read each. */
const SECTIONS = [
  ['deployments', 'Deployments', 'viewer'],
  ['services', 'Services', 'viewer'],
  ['environments', 'Environments', 'viewer'],
  ['runners', 'Runners', 'viewer'],
  ['secrets', 'Secrets', 'viewer'],
  ['service-users', 'Service users', 'admin'],
  ['webhooks', 'Webhooks', 'admin'],
  ['events', 'Events', 'admin'],
];

/** The organization whose pages are shown, for the tab's title. */
let shownOrg = null;

function frame(org, section) {
  shownOrg = org;
  fill($nav, ...(org ? SECTIONS.filter(([id, , least]) => id === section || may(least)).map(([id, title]) => {
    const a = link(title, 'o', org, id);
    if (id === section) {
      a.className = 'current';
      a.setAttribute('aria-current', 'page');
    }
    return a;
  }) : []));
  const current = session();
  fill($who,
    org ? h('span', {}, 'Organization ', h('strong', {}, org), ' · ', link('switch', '')) : null,
    h('span', { title: current?.subject ?? '', id: 'caller' }, caller.name ?? current?.subject ?? '', caller.role ? h('span', { class: 'role' }, ` (${caller.role})`) : null),
    h('button', { type: 'button', onclick: (event) => signOutByUser(event.currentTarget) }, 'Sign out'));
}

function page(title, ...children) {
  const heading = h('h1', { tabindex: '-1' }, title);
  const typed = carryTypedInto === renders ? typedIn($main) : [];
  carryTypedInto = 0;
  fill($main, heading, ...children);
  // The field being typed in, if the page still has it, keeps the focus (see followRole).
  putTyped($main, typed);
  // Tabs and history name the page, not only the product (text, never markup).
  document.title = [heading.textContent, shownOrg, 'Slipway'].filter(Boolean).join(' · ');
  // The element that had the focus (a link in the header, a button) was drawn over: the focus goes
  // to the new page's heading, where reading and the next Tab go on, not to the top of the document.
  if (document.activeElement === null || document.activeElement === document.body) heading.focus({ preventScroll: true });
}

/**
 * Deletes a service or an environment after a confirmation, then goes back to its list. The API
 * refuses one that something is queued or running in, and says so (shown by the button); one that
 * only serves is deleted after a second confirmation that says what stops (`?force=true`).
 */
function deleteButton(org, section, kind, name, path) {
  const gone = () => {
    notify(`The ${kind} ${name} is deleted.`);
    location.hash = `#/o/${encodeURIComponent(org)}/${section}`;
  };
  return h('button', { type: 'button', class: 'danger', onclick: (e) => {
    if (!confirm(`Delete the ${kind} ${name}?`)) return;
    const where = e.target.closest('.card') ?? e.target.parentElement;
    act(e.target, where, async () => {
      try {
        await api('DELETE', path);
      } catch (error) {
        const conflicts = error instanceof Problem && error.body.code === `${kind}_in_use` ? error.body.conflicts ?? [] : [];
        const servingOnly = conflicts.length > 0 && conflicts.every((c) => c.state === 'succeeded');
        if (!servingOnly) throw error;
        // The problem names deployments only: what stops is said by their service (or environment).
        const serving = await Promise.all(conflicts.map(async (c) => {
          const d = await api('GET', `/v1/orgs/${encodeURIComponent(org)}/deployments/${encodeURIComponent(c.deployment)}`).catch((e) => { if (e instanceof Stale) throw e; return null; });
          const label = d === null ? '' : kind === 'service' ? `in ${d.environment.name} ` : `the service ${d.service.name} `;
          return `${label}(${c.deployment})`;
        }));
        const what = kind === 'service' ? `The service ${name} serves ${serving.join(', ')}` : `In the environment ${name}, ${serving.join(', ')} ${serving.length === 1 ? 'serves' : 'serve'}`;
        if (!confirm(`${what}. Delete the ${kind} anyway? Its runners stop what serves, and its deployment history, rollback targets included, goes.`)) return;
        await api('DELETE', path, { query: { force: 'true' } });
      }
      gone();
    });
  } }, `Delete ${kind}`);
}

// ---------------------------------------------------------------------------------------------
// Organizations
// ---------------------------------------------------------------------------------------------

async function orgsView() {
  frame(null);
  const first = await api('GET', '/v1/orgs');
  if (first.orgs.length === 1 && !first.nextCursor && !orgsView.shown) {
    orgsView.shown = true;
    location.hash = `#/o/${encodeURIComponent(first.orgs[0].slug)}/deployments`;
    return;
  }
  page('Organizations', pagedList((cursor) => cursor ? api('GET', '/v1/orgs', { query: { cursor } }) : Promise.resolve(first),
    (p) => table(['Name', 'Slug', 'Created'], p.orgs.map((o) => h('tr', {}, h('td', {}, link(o.name, 'o', o.slug, 'deployments')), h('td', {}, h('code', {}, o.slug)), h('td', {}, when(o.createdAt)))),
      'This service user belongs to no organization.')));
}

// ---------------------------------------------------------------------------------------------
// Deployments
// ---------------------------------------------------------------------------------------------

const STATES = ['queued', 'in_progress', 'succeeded', 'failed', 'cancelled', 'superseded'];

/** The environments the caller may deploy into: a protected one takes deployments from admins and owners only. */
const deployable = (environments) => environments.filter((e) => !e.protected || may('admin'));
/** An environment to choose for a deployment, `value` its id or name: a locked one is shown, and cannot be chosen. */
const environmentOption = (e, value) => h('option', { value, disabled: Boolean(e.lock) }, `${e.name}${e.protected ? ' (protected)' : ''}${e.lock ? ' (locked)' : ''}`);
const UNFINISHED = ['queued', 'in_progress'];

/** Escape sequences a program writes for a terminal (colours, cursor moves, titles, links): not text. */
const TERMINAL_SEQUENCE = /\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]/g;

/**
 * A log line as a terminal would leave it: without its escape sequences, and after a carriage
 * return only what was written over the line (a progress bar's last state). The API keeps the line
 * as it was written.
 */
function asTerminalShows(line) {
  const text = line.replace(TERMINAL_SEQUENCE, '').replace(/\r+$/, '');
  return text.slice(text.lastIndexOf('\r') + 1);
}
/** A deployment's page starts from its log's last lines, and keeps at most this many as more come. */
const LOG_SHOWN_FIRST = 1000;
const LOG_SHOWN_MAX = 5000;

function deploymentRow(org, d) {
  return h('tr', {},
    h('td', {}, link(d.id, 'o', org, 'deployments', d.id)),
    h('td', {}, link(d.service.name, 'o', org, 'services', d.service.id)),
    h('td', {}, link(d.environment.name, 'o', org, 'environments', d.environment.id)),
    h('td', {}, d.revision ?? '—'),
    h('td', { 'data-deployment': d.id, 'data-state': d.state }, badge(d.state)),
    h('td', {}, when(d.createdAt)));
}

/** Pages of the organization's queued and running deployments read at most in one look. */
const UNFINISHED_PAGES = 5;
/** Rows that left that list (they ended) looked up one by one at most in one look. */
const ENDED_LOOKUPS = 10;

/**
 * Keeps the states of the queued and running deployments in the page's lists current, until another
 * view is drawn: every 5 seconds, the organization's unfinished deployments in one list request
 * (while any row is unfinished); a row no longer among them has ended, and is read on its own for
 * its final state. However many rows a page holds, a look costs a few requests: the caller's rate
 * limit is shared with its other clients.
 */
function followListedStates(org) {
  const drawn = renders;
  const orgPath = `/v1/orgs/${encodeURIComponent(org)}/deployments`;
  /** What changed in this look, said at once when it is over. */
  let changed = [];
  const show = (cell, state) => {
    if (state === cell.dataset.state) return;
    cell.dataset.state = state;
    fill(cell, badge(state));
    const row = cell.closest('tr');
    changed.push(`The deployment of ${row.cells[1].textContent} into ${row.cells[2].textContent}: now ${state.replace('_', ' ')}.`);
  };
  const poll = async () => {
    if (renders !== drawn) return;
    const cells = [...$main.querySelectorAll('td[data-deployment]')].filter((cell) => UNFINISHED.includes(cell.dataset.state));
    try {
      if (cells.length > 0) {
        const now = new Map();
        for (let cursor = null, page = 0; page < UNFINISHED_PAGES; page++) {
          const query = new URLSearchParams([['state', 'queued'], ['state', 'in_progress'], ['limit', '200'], ...(cursor ? [['cursor', cursor]] : [])]);
          const list = await api('GET', `${orgPath}?${query}`);
          for (const d of list.deployments) now.set(d.id, d.state);
          cursor = list.nextCursor;
          if (cursor === null) break;
        }
        let lookups = 0;
        for (const cell of cells) {
          const state = now.get(cell.dataset.deployment);
          if (state !== undefined) show(cell, state);
          else if (lookups < ENDED_LOOKUPS) {
            lookups++;
            show(cell, (await api('GET', `${orgPath}/${encodeURIComponent(cell.dataset.deployment)}`)).state);
          }
        }
      }
      if (changed.length > 0 && renders === drawn) announce(changed.join(' '));
      changed = [];
    } catch (error) {
      // Another view, or signed out: nothing more to follow. Any other trouble: tried again next time.
      if (quiet(error)) return;
    }
    setTimeout(poll, 5_000);
  };
  setTimeout(poll, 5_000);
}

/** How a serving deployment's process is doing and where it answers, as its runner last reported it. */
function processSummary(p) {
  const exit = p.lastExit ? (p.lastExit.signal ? `signal ${p.lastExit.signal}` : `code ${p.lastExit.code}`) : null;
  return [badge(p.state, p.state === 'running' ? 'succeeded' : p.state === 'stopped' ? 'failed' : 'in_progress'),
    p.address ? [' on ', h('code', {}, `${p.address.hostname}:${p.address.port}`)] : null,
    p.exits > 0 ? ` · exited on its own ${p.exits} ${p.exits === 1 ? 'time' : 'times'}` : '',
    exit ? [`, last with ${exit} `, when(p.lastExit.at)] : '',
    h('span', { class: 'muted' }, ' · reported ', when(p.reportedAt))];
}

const DEPLOYMENT_HEADINGS = ['Deployment', 'Service', 'Environment', 'Revision', 'State', 'Created'];

async function deploymentsView(org, query) {
  frame(org, 'deployments');
  const filters = h('form', { id: 'deployment-filters' },
    h('label', {}, 'Service', h('input', { name: 'service', value: query.get('service') ?? '', placeholder: 'any' })),
    h('label', {}, 'Environment', h('input', { name: 'environment', value: query.get('environment') ?? '', placeholder: 'any' })),
    h('label', {}, 'State', h('select', { name: 'state' }, h('option', { value: '' }, 'any'),
      STATES.map((s) => h('option', { value: s, selected: query.get('state') === s }, s.replace('_', ' '))))),
    h('button', { type: 'submit' }, 'Filter'));
  filters.addEventListener('submit', (event) => {
    event.preventDefault();
    const chosen = new URLSearchParams();
    for (const [key, value] of new FormData(filters)) if (value) chosen.set(key, String(value));
    navigate(`#/o/${encodeURIComponent(org)}/deployments${chosen.size ? `?${chosen}` : ''}`);
  });
  const wanted = { service: query.get('service'), environment: query.get('environment'), state: query.get('state') };
  page('Deployments', h('div', { class: 'card' }, filters),
    pagedList((cursor) => api('GET', `/v1/orgs/${encodeURIComponent(org)}/deployments`, { query: { ...wanted, cursor } }),
      (p) => table(DEPLOYMENT_HEADINGS, p.deployments.map((d) => deploymentRow(org, d)), 'No deployments match.')));
  followListedStates(org);
}

async function deploymentView(org, id) {
  frame(org, 'deployments');
  const base = `/v1/orgs/${encodeURIComponent(org)}/deployments/${encodeURIComponent(id)}`;
  let d = await api('GET', base);
  const head = h('div', { class: 'card' });
  // Scrolled from the keyboard too. A log (read out as lines come) once its first lines are in,
  // not at once with the last 1,000.
  const logBox = h('pre', { class: 'log', id: 'deployment-log', tabindex: '0', 'aria-labelledby': 'deployment-log-heading' }, d.logsRemovedAt
    ? `Its log was removed at ${d.logsRemovedAt}, its retention over (SLIPWAY_DEPLOYMENT_LOG_RETENTION_DAYS).`
    : 'No log lines yet: they appear here as the runner sends them.');
  const actions = h('div', { class: 'row' });
  const drawHead = () => {
    fill(head,
      h('div', { class: 'spread' }, h('div', { class: 'row' }, badge(d.state), h('span', { class: 'muted' }, `attempt ${d.attempt}`)), actions),
      h('p', {}, 'Service ', link(d.service.name, 'o', org, 'services', d.service.id), ` (version ${d.service.version}) into `,
        link(d.environment.name, 'o', org, 'environments', d.environment.id), d.revision ? ` · revision ${d.revision}` : ''),
      d.description ? h('p', {}, d.description) : null,
      d.reason ? h('p', {}, h('strong', {}, 'Reason: '), d.reason) : null,
      d.process ? h('p', { id: 'deployment-process' }, h('strong', {}, 'Process: '), processSummary(d.process)) : null,
      d.rollbackOf ? h('p', {}, 'Rollback of ', link(d.rollbackOf, 'o', org, 'deployments', d.rollbackOf)) : null,
      d.promotedFrom ? h('p', {}, 'Promoted from ', link(d.promotedFrom, 'o', org, 'deployments', d.promotedFrom)) : null,
      h('p', { class: 'muted' }, 'Created ', when(d.createdAt), ' by ', d.createdBy ?? '—', d.finishedAt ? [' · finished ', when(d.finishedAt)] : ''));
    fill(actions,
      UNFINISHED.includes(d.state) && may('developer') ? h('button', { type: 'button', class: 'danger', onclick: (e) => act(e.target, head, async () => {
        if (!confirm(`Cancel the deployment of ${d.service.name} into ${d.environment.name}${d.state === 'in_progress' ? '? Its runner stops the new process; what served before goes on serving.' : '?'}`)) return;
        d = await api('POST', `${base}/cancel`, { body: {} });
        notify('Deployment cancelled.');
        drawHead();
      }) }, 'Cancel') : null,
      // What serves now (succeeded) is no rollback target: only what served before it.
      d.state === 'superseded' && may('developer') ? h('button', { type: 'button', onclick: (e) => act(e.target, head, async () => {
        if (!confirm(`Roll ${d.service.name} in ${d.environment.name} back to this deployment${d.revision ? ` (revision ${d.revision})` : ''}? A new deployment of it is queued, and replaces what serves there once it succeeds.`)) return;
        const made = await api('POST', `${base}/rollback`, { body: {} });
        notify(`Rolling back: deployment ${made.id} queued.`);
        location.hash = `#/o/${encodeURIComponent(org)}/deployments/${encodeURIComponent(made.id)}`;
      }) }, 'Roll back to this') : null);
  };
  drawHead();
  // What succeeded here can go on to another environment, with that environment's configuration:
  // offered once it has succeeded, also when that happens while the page is open.
  const promote = h('div');
  let promoteOffered = false;
  const offerPromotion = async () => {
    if (promoteOffered || !(d.state === 'succeeded' || d.state === 'superseded') || !may('developer')) return;
    promoteOffered = true;
    const others = deployable(await everyPage((cursor) => api('GET', `/v1/orgs/${encodeURIComponent(org)}/environments`, { query: { limit: 100, cursor } }), 'environments'))
      .filter((e) => e.id !== d.environment.id);
    fill(promote, others.length === 0 ? null : h('details', { class: 'card' }, h('summary', {}, 'Promote to another environment'),
      h('p', { class: 'muted' }, 'The same spec, revision, service secret versions and variables, with the other environment\'s variables and secrets instead of this one\'s.'),
      onSubmit(h('form', { id: 'promote' },
        h('label', {}, 'Environment', h('select', { name: 'environment', required: true },
          others.map((e) => environmentOption(e, e.id)))),
        h('label', {}, 'Description', h('input', { name: 'description' })),
        h('button', { type: 'submit', class: 'primary' }, 'Promote')), async (form) => {
        const made = await api('POST', `${base}/promote`, { body: { environment: form.get('environment'), description: form.get('description') || undefined } });
        notify(`Promoting: deployment ${made.id} into ${made.environment.name} queued.`);
        location.hash = `#/o/${encodeURIComponent(org)}/deployments/${encodeURIComponent(made.id)}`;
      })));
  };
  await offerPromotion();
  // What it changes from the one it replaced: a reviewer's first question.
  const changes = await api('GET', `${base}/changes`);
  const shown = (value) => (value === undefined ? '—' : typeof value === 'string' ? value : JSON.stringify(value));
  const changeRows = [
    ...(changes.revision ? [['revision', changes.revision.from === null ? 'added' : changes.revision.to === null ? 'removed' : 'changed', changes.revision.from ?? '—', changes.revision.to ?? '—']] : []),
    ...changes.spec.map((c) => [c.field, c.change, shown(c.from), shown(c.to)]),
    ...changes.variables.map((c) => [c.name, c.change, shown(c.from), shown(c.to)]),
    ...changes.secrets.map((c) => [`secret ${c.secret}${c.key ? ` ${c.key}` : ''}${c.as ? ` as ${c.as}` : ''}`, c.change,
      c.from === undefined ? '—' : `version ${c.from}`, c.to === undefined ? '—' : `version ${c.to}`]),
  ];
  const changesBox = h('div', { id: 'deployment-changes' },
    h('p', { class: 'muted' }, changes.against
      ? ['Against ', link(changes.against.id, 'o', org, 'deployments', changes.against.id), ` (${changes.against.revision ?? 'no revision'}, ${changes.against.state}), the last that succeeded here before it.`]
      : 'The first of its service here to be compared: everything is new.'),
    table(['What', 'Change', 'From', 'To'], changeRows.map((cells) => h('tr', {}, cells.map((c, i) => h('td', {}, i === 0 ? h('code', {}, c) : c)))), 'Nothing changes.'));
  page(`Deployment ${d.id}`, head, promote, h('h2', {}, 'Changes'), changesBox, h('h2', { id: 'deployment-log-heading' }, 'Log'), logBox, h('h2', {}, 'Spec (as frozen at creation)'), json(d.spec, 'Spec'));

  // Follows the log while the deployment runs, from its last lines; stops when anything else is drawn.
  let after = null;
  const drawn = renders;
  /** Why the last poll failed, shown until one succeeds. */
  let trouble = null;
  const follow = async () => {
    if (renders !== drawn) return;
    try {
      for (;;) {
        const chunk = await api('GET', `${base}/logs`, { query: after === null ? { tail: LOG_SHOWN_FIRST } : { after, limit: 500 } });
        // A reader at the end of the log stays there as lines come; one who scrolled up to read is left there.
        const atEnd = logBox.scrollTop + logBox.clientHeight >= logBox.scrollHeight - 4;
        if (after === null && chunk.lines.length > 0) {
          const first = chunk.lines[0].seq;
          fill(logBox, first > 1 ? h('span', { class: 'muted' }, `… ${(first - 1).toLocaleString()} earlier lines are not shown here (slipway deployment logs ${d.id} prints them all).\n`) : []);
        }
        for (const line of chunk.lines) logBox.append(h('span', { class: line.stream }, `${asTerminalShows(line.line)}\n`));
        // A long-running log keeps only its last lines on the page.
        while (logBox.childElementCount > LOG_SHOWN_MAX) logBox.firstElementChild.remove();
        if (atEnd) logBox.scrollTop = logBox.scrollHeight;
        if (after === null) logBox.setAttribute('role', 'log');
        after = chunk.nextAfter;
        if (!chunk.hasMore) break;
      }
      const fresh = await api('GET', base);
      trouble?.remove();
      trouble = null;
      // A runner's report on the process moves no updatedAt: compared as well.
      if (fresh.state !== d.state) announce(`The deployment of ${fresh.service.name} into ${fresh.environment.name}: now ${fresh.state.replace('_', ' ')}.`);
      if (fresh.state !== d.state || fresh.updatedAt !== d.updatedAt || JSON.stringify(fresh.process) !== JSON.stringify(d.process)) { d = fresh; drawHead(); await offerPromotion(); }
      // Followed while it runs, and more slowly while it serves (a runner sends its service's output).
      if (UNFINISHED.includes(d.state)) setTimeout(follow, 2_000);
      else if (d.state === 'succeeded') setTimeout(follow, 10_000);
    } catch (error) {
      if (quiet(error)) return;
      trouble?.remove();
      trouble = head.appendChild(problemBox(error));
      // A server out of reach, restarting or busy comes back: the log is followed on. A refusal ends it.
      if (error instanceof Problem && (error.status === 0 || error.status === 429 || error.status >= 500)) {
        setTimeout(follow, UNFINISHED.includes(d.state) ? 2_000 : 10_000);
      }
    }
  };
  follow();
}

// ---------------------------------------------------------------------------------------------
// Services
// ---------------------------------------------------------------------------------------------

const SPEC_TEMPLATE = {
  command: ['node', 'server.js'],
  port: 3000,
  healthCheck: { path: '/healthz', timeoutSeconds: 30 },
  variables: { NODE_ENV: 'production' },
  secrets: [],
};

function parseJson(text, field, name) {
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new Problem(400, { title: 'Not JSON', detail: `${field} is not valid JSON: ${error.message}`, field: name });
  }
}

async function servicesView(org) {
  frame(org, 'services');
  const base = `/v1/orgs/${encodeURIComponent(org)}/services`;
  const create = onSubmit(h('form', { class: 'stack', id: 'create-service' },
    h('label', {}, 'Name', h('input', { name: 'name', required: true, placeholder: 'web', spellcheck: 'false' })),
    h('label', {}, 'Description', h('input', { name: 'description' })),
    h('label', {}, 'Spec (JSON: command or image, port, healthCheck, variables, secrets)',
      h('textarea', { name: 'spec', class: 'code', rows: 10, spellcheck: 'false', value: JSON.stringify(SPEC_TEMPLATE, null, 2) })),
    h('button', { type: 'submit', class: 'primary' }, 'Create service')), async (form) => {
    const made = await api('POST', base, { body: { name: form.get('name'), description: form.get('description') || undefined, spec: parseJson(String(form.get('spec')), 'The spec', 'spec') } });
    notify(`Service ${made.name} created.`);
    location.hash = `#/o/${encodeURIComponent(org)}/services/${encodeURIComponent(made.name)}`;
  });
  page('Services',
    pagedList((cursor) => api('GET', base, { query: { cursor } }),
      (p) => table(['Name', 'Version', 'Runs', 'Updated'], p.services.map((s) => h('tr', {},
        h('td', {}, link(s.name, 'o', org, 'services', s.name)), h('td', {}, s.version),
        h('td', {}, h('code', {}, s.spec.command ? s.spec.command.join(' ') : s.spec.image ?? '')), h('td', {}, when(s.updatedAt)))), 'No services yet.')),
    offered('developer', h('details', { class: 'card' }, h('summary', {}, 'New service'), create)));
}

async function serviceView(org, name) {
  frame(org, 'services');
  const orgPath = `/v1/orgs/${encodeURIComponent(org)}`;
  const base = `${orgPath}/services/${encodeURIComponent(name)}`;
  const { data: service, etag: serviceTag } = await api('GET', base, { etag: true });
  const environments = { environments: await everyPage((cursor) => api('GET', `${orgPath}/environments`, { query: { limit: 100, cursor } }), 'environments') };
  const targets = deployable(environments.environments);
  const deploy = onSubmit(h('form', { id: 'deploy' },
    h('label', {}, 'Environment', h('select', { name: 'environment', required: true },
      targets.map((e) => environmentOption(e, e.name)))),
    h('label', {}, 'Revision', h('input', { name: 'revision', placeholder: 'v1.2.3 or a commit' })),
    h('label', {}, 'Description', h('input', { name: 'description' })),
    h('button', { type: 'submit', class: 'primary' }, 'Deploy')), async (form) => {
    const made = await api('POST', `${orgPath}/deployments`, {
      body: { service: service.name, environment: form.get('environment'), revision: form.get('revision') || undefined, description: form.get('description') || undefined },
    });
    notify(`Deployment ${made.id} queued.`);
    location.hash = `#/o/${encodeURIComponent(org)}/deployments/${encodeURIComponent(made.id)}`;
  });
  const edit = onSubmit(h('form', { class: 'stack', id: 'edit-service' },
    h('label', {}, 'Description', h('input', { name: 'description', value: service.description })),
    h('label', {}, 'Spec (JSON; replaces the whole spec, deployments keep the one they froze)',
      h('textarea', { name: 'spec', class: 'code', rows: 14, spellcheck: 'false', value: JSON.stringify(service.spec, null, 2) })),
    h('button', { type: 'submit', class: 'primary' }, 'Save')), async (form) => {
    // With the ETag of the version shown: an edit made meanwhile elsewhere is a 412, not overwritten.
    const saved = await api('PATCH', base, { headers: { 'if-match': serviceTag }, body: { description: form.get('description'), spec: parseJson(String(form.get('spec')), 'The spec', 'spec') } });
    notify(`Service ${saved.name} saved as version ${saved.version}.`);
    render();
  });
  const remove = deleteButton(org, 'services', 'service', service.name, base);
  page(`Service ${service.name}`,
    h('div', { class: 'card' }, h('p', {}, service.description || h('span', { class: 'muted' }, 'No description.')),
      h('p', { class: 'muted' }, `Version ${service.version} · updated `, when(service.updatedAt), ` · ${service.id}`),
      !may('developer') ? null
        : targets.length > 0 ? deploy
          : environments.environments.length > 0 ? h('p', { class: 'muted' }, 'Every environment is protected: an admin or owner deploys there.')
            : h('p', {}, 'Create an environment to deploy into: ', link('Environments', 'o', org, 'environments'), '.')),
    h('h2', {}, 'Recent deployments'),
    pagedList((cursor) => api('GET', `${orgPath}/deployments`, { query: { service: service.name, limit: 10, cursor } }),
      (p) => table(DEPLOYMENT_HEADINGS, p.deployments.map((d) => deploymentRow(org, d)), 'Not deployed yet.')),
    h('h2', {}, 'Spec'),
    offered('developer', h('details', { class: 'card' }, h('summary', {}, 'Edit'), edit)),
    json(service.spec, 'Spec'),
    offered('admin', [h('h2', {}, 'Danger zone'), h('div', { class: 'card' }, remove)]));
  followListedStates(org);
}

// ---------------------------------------------------------------------------------------------
// Environments
// ---------------------------------------------------------------------------------------------

async function environmentsView(org) {
  frame(org, 'environments');
  const base = `/v1/orgs/${encodeURIComponent(org)}/environments`;
  const create = onSubmit(h('form', { id: 'create-environment' },
    h('label', {}, 'Name', h('input', { name: 'name', required: true, placeholder: 'production', spellcheck: 'false' })),
    h('label', {}, 'Description', h('input', { name: 'description' })),
    h('label', { class: 'inline' }, h('input', { type: 'checkbox', name: 'protected' }), 'Protected (admin and owner deploy)'),
    h('button', { type: 'submit', class: 'primary' }, 'Create environment')), async (form) => {
    const made = await api('POST', base, { body: { name: form.get('name'), description: form.get('description') || undefined, protected: form.get('protected') === 'on' } });
    notify(`Environment ${made.name} created.`);
    render();
  });
  page('Environments',
    pagedList((cursor) => api('GET', base, { query: { cursor } }),
      (p) => table(['Name', 'Description', 'Created'], p.environments.map((e) => h('tr', {},
        h('td', {}, link(e.name, 'o', org, 'environments', e.name), ' ', e.protected ? badge('protected') : null, ' ', e.lock ? badge('locked', 'failed') : null),
        h('td', {}, e.description), h('td', {}, when(e.createdAt)))), 'No environments yet.')),
    offered('admin', [h('h2', {}, 'New environment'), h('div', { class: 'card' }, create)]));
}

async function environmentView(org, name) {
  frame(org, 'environments');
  const base = `/v1/orgs/${encodeURIComponent(org)}/environments/${encodeURIComponent(name)}`;
  const { data: env, etag: envTag } = await api('GET', base, { etag: true });
  // With the ETag of the version shown: a change made meanwhile elsewhere is a 412, not overwritten.
  const ifMatch = envTag ? { 'if-match': envTag } : {};
  const toggle = h('button', { type: 'button', onclick: (e) => act(e.target, e.target.closest('.card'), async () => {
    const saved = await api('PATCH', base, { headers: ifMatch, body: { protected: !env.protected } });
    notify(saved.protected ? `${saved.name} is protected.` : `${saved.name} is no longer protected.`);
    render();
  }) }, env.protected ? 'Unprotect' : 'Protect');
  const remove = deleteButton(org, 'environments', 'environment', env.name, base);
  // A deploy freeze: no deployment into it is made while it is locked.
  const lockForm = env.lock ? null : onSubmit(h('form', { id: 'lock-environment' },
    h('label', {}, 'Why (shown to everyone refused a deployment)', h('input', { name: 'reason', required: true, maxlength: 500 })),
    h('button', { type: 'submit', class: 'danger' }, 'Lock')), async (form) => {
    const saved = await api('PUT', `${base}/lock`, { body: { reason: form.get('reason') } });
    notify(`${saved.name} is locked: no deployment into it until it is unlocked.`);
    render();
  });
  const unlock = env.lock ? h('button', { type: 'button', onclick: (e) => act(e.target, e.target.closest('.card'), async () => {
    const saved = await api('DELETE', `${base}/lock`);
    notify(`${saved.name} is unlocked: it takes deployments again.`);
    render();
  }) }, 'Unlock') : null;
  const configure = onSubmit(h('form', { class: 'stack', id: 'environment-configuration' },
    h('label', {}, 'Configuration (JSON: `variables`, and `secrets` named as in a service spec; each replaces what the environment had)',
      h('textarea', { name: 'configuration', class: 'code', rows: 10, spellcheck: 'false', value: JSON.stringify({ variables: env.variables, secrets: env.secrets }, null, 2) })),
    h('button', { type: 'submit', class: 'primary' }, 'Save configuration')), async (form) => {
    const config = parseJson(String(form.get('configuration')), 'The configuration', 'configuration');
    if (config === null || typeof config !== 'object' || Array.isArray(config)) {
      throw new Problem(400, { title: 'Not a configuration', detail: 'The configuration is a JSON object: {"variables": {…}, "secrets": […]}.', field: 'configuration' });
    }
    const saved = await api('PATCH', base, { headers: ifMatch, body: { variables: config.variables, secrets: config.secrets } });
    notify(`Environment ${saved.name}: configuration saved. The next deployment into it takes it; those made keep theirs.`);
    render();
  });
  const configured = Object.keys(env.variables).length > 0 || env.secrets.length > 0;
  page(`Environment ${env.name}`,
    h('div', { class: 'card' }, h('div', { class: 'spread' },
      h('div', {}, env.protected ? badge('protected') : badge('unprotected', 'cancelled'), ' ', env.description),
      offered('admin', h('div', { class: 'row' }, toggle, remove)))),
    env.lock
      ? h('div', { class: 'card', id: 'environment-lock' }, h('div', { class: 'spread' },
        h('p', {}, badge('locked', 'failed'), ' No deployment into it until it is unlocked: ', env.lock.reason, h('span', { class: 'muted' }, ' (', env.lock.lockedBy ?? '—', ', ', when(env.lock.lockedAt), ')')),
        offered('admin', unlock)))
      : offered('admin', h('details', { class: 'card' }, h('summary', {}, 'Lock (a deploy freeze)'), lockForm)),
    h('h2', {}, 'Configuration'),
    h('p', { class: 'muted' }, 'Every deployment into this environment gets these besides its service\'s: its plain variables over the service\'s of the same name, its secrets beside the service\'s (a variable both would export is refused when deploying).'),
    configured ? json({ variables: env.variables, secrets: env.secrets }, 'Configuration') : h('p', {}, 'None: deployments here get their service\'s variables and secrets only.'),
    offered('admin', h('details', { class: 'card' }, h('summary', {}, 'Edit'), configure)),
    h('h2', {}, 'Runners'),
    runnersList(org, env.id, `No runner takes ${env.name}'s deployments yet: start one with slipway runner --environment ${env.name}.`),
    h('h2', {}, 'Serving now'),
    pagedList((cursor) => api('GET', `${base}/active`, { query: { cursor } }),
      (p) => table(DEPLOYMENT_HEADINGS, p.deployments.map((d) => deploymentRow(org, d)), 'Nothing serves here yet.')),
    h('h2', {}, 'Recent deployments'),
    pagedList((cursor) => api('GET', `/v1/orgs/${encodeURIComponent(org)}/deployments`, { query: { environment: env.name, limit: 10, cursor } }),
      (p) => table(DEPLOYMENT_HEADINGS, p.deployments.map((d) => deploymentRow(org, d)), 'Nothing deployed here yet.')));
  followListedStates(org);
}

// ---------------------------------------------------------------------------------------------
// Runners
// ---------------------------------------------------------------------------------------------

/** The runners list (`environment`: those that take its deployments), a page at a time. */
function runnersList(org, environment, empty) {
  return pagedList((cursor) => api('GET', `/v1/orgs/${encodeURIComponent(org)}/runners`, { query: { environment, cursor } }),
    (p) => table(['Runner', 'State', 'Service user', 'Machine', 'Environments', 'Last heard from', 'Carrying out', 'Serving'], p.runners.map((r) => h('tr', {},
      h('td', {}, h('code', {}, r.host)), h('td', {}, badge(r.state, r.state === 'online' ? 'succeeded' : 'cancelled')),
      h('td', {}, r.serviceUser.name), h('td', {}, [r.hostname, r.version].filter(Boolean).join(' · ')),
      h('td', {}, r.environments === null ? 'all' : r.environments.map((e) => e.name).join(', ') || 'none (deleted)'),
      h('td', {}, when(r.lastSeenAt)),
      h('td', {}, ...r.inProgress.flatMap((id, i) => [i > 0 ? ' ' : null, link(id, 'o', org, 'deployments', id)])),
      h('td', {}, String(r.serving)))), empty));
}

async function runnersView(org) {
  frame(org, 'runners');
  page('Runners',
    h('p', { class: 'muted' }, 'Each runner process that carries out deployments (one started again is a new entry). Online: heard from within the server\'s host timeout (SLIPWAY_RUNNER_HOST_TIMEOUT_SECONDS, and at least 40 seconds). Runners not heard from for 7 days are forgotten.'),
    runnersList(org, undefined, 'No runner has been seen yet: start one with slipway runner.'));
}

// ---------------------------------------------------------------------------------------------
// Secrets
// ---------------------------------------------------------------------------------------------

/** `.env` text as variables (dotenv.js, shared with the CLI); a line it cannot read, or a key given twice, refuses it all. */
function dotenvValues(text) {
  const { values, problems } = parseDotenv(text);
  if (problems.length > 0) {
    throw new Problem(400, { title: 'Not .env text', detail: 'Fix these lines; nothing was saved.', errors: problems.map((p) => ({ pointer: `line ${p.line}`, message: p.message })), field: 'values' });
  }
  if (Object.keys(values).length === 0) throw new Problem(400, { title: 'Not .env text', detail: 'There is no KEY=value line to save; nothing was saved.', field: 'values' });
  return values;
}

async function secretsView(org, query) {
  frame(org, 'secrets');
  const base = `/v1/orgs/${encodeURIComponent(org)}/secrets`;
  const deleted = query.get('deleted') === 'true';
  const prefix = query.get('prefix') ?? '';
  const filter = h('form', { id: 'secret-filter' },
    h('label', {}, 'Name starts with', h('input', { name: 'prefix', value: prefix, spellcheck: 'false' })),
    h('label', { class: 'inline' }, h('input', { type: 'checkbox', name: 'deleted', checked: deleted }), 'Deleted (restorable)'),
    h('button', { type: 'submit' }, 'Show'));
  filter.addEventListener('submit', (event) => {
    event.preventDefault();
    const chosen = new URLSearchParams();
    const form = new FormData(filter);
    if (form.get('prefix')) chosen.set('prefix', String(form.get('prefix')));
    if (form.get('deleted') === 'on') chosen.set('deleted', 'true');
    navigate(`#/o/${encodeURIComponent(org)}/secrets${chosen.size ? `?${chosen}` : ''}`);
  });
  const save = onSubmit(h('form', { class: 'stack', id: 'save-secret' },
    h('label', {}, 'Name', h('input', { name: 'name', required: true, placeholder: 'database', spellcheck: 'false' })),
    h('label', {}, 'Values, as .env lines (KEY=value)', h('textarea', { name: 'values', class: 'code', rows: 6, required: true, spellcheck: 'false', autocomplete: 'off', 'aria-describedby': 'save-secret-hint', 'data-hint': 'save-secret-hint' })),
    h('p', { class: 'muted', id: 'save-secret-hint' }, 'Creates the secret, or makes a new version of it holding exactly these keys (you are asked first if that leaves some of its keys out). Values are encrypted at rest and never shown again unless an admin reveals them.'),
    h('button', { type: 'submit', class: 'primary' }, 'Save secret')), async (form) => {
    const name = String(form.get('name')).trim();
    const values = dotenvValues(String(form.get('values')));
    // A secret of that name already: its new version holds these keys only. Keys it has that the
    // lines leave out are named and asked about first, not dropped unseen.
    // Asked of the list (ordered by name, so the name itself comes first), where a new name is no 404.
    const existing = (await api('GET', base, { query: { prefix: name, limit: 1 } })).secrets.find((s) => s.name === name);
    const dropped = existing === undefined ? [] : existing.keys.filter((key) => !Object.hasOwn(values, key));
    if (dropped.length > 0 && !confirm(`${existing.name} has ${dropped.length === 1 ? 'a key' : 'keys'} these lines do not set: ${dropped.join(', ')}. Its new version holds only the keys given here (version ${existing.version} keeps the others, and can be restored). Save anyway?`)) return;
    const result = await api('PUT', base, { body: { secrets: [{ name, values }] } });
    const item = result.secrets[0];
    save.reset();
    notify(`Secret ${item.name}: ${item.result ?? 'saved'}, version ${item.version}.`);
    location.hash = `#/o/${encodeURIComponent(org)}/secrets/${encodeURIComponent(item.name)}`;
  });
  const rows = (p) => table(deleted ? ['Name', 'Version', 'Keys', 'Deleted', 'Restorable until', ''] : ['Name', 'Version', 'Keys', 'Updated'], p.secrets.map((s) => h('tr', {},
    h('td', {}, deleted ? s.name : link(s.name, 'o', org, 'secrets', s.name)),
    h('td', {}, s.version),
    h('td', {}, s.keys.map((k) => [h('code', {}, k), ' '])),
    h('td', {}, when(deleted ? s.deletedAt : s.updatedAt)),
    deleted ? h('td', {}, when(s.restorableUntil)) : null,
    deleted ? h('td', {}, offered('admin', h('button', { type: 'button', 'aria-label': `Restore ${s.name}`, onclick: (e) => act(e.target, e.target.parentElement, async () => {
      await api('POST', `${base}/${encodeURIComponent(s.name)}/restore`, { body: {} });
      notify(`Secret ${s.name} restored.`);
      location.hash = `#/o/${encodeURIComponent(org)}/secrets/${encodeURIComponent(s.name)}`;
    }) }, 'Restore'))) : null)), deleted ? 'No deleted secrets to restore.' : prefix ? `No secret's name starts with ${prefix}.` : 'No secrets here yet.');
  page('Secrets', h('div', { class: 'card' }, filter),
    pagedList((cursor) => api('GET', base, { query: { prefix, deleted: deleted ? 'true' : undefined, cursor } }), rows),
    deleted ? null : offered('developer', [h('h2', {}, 'New secret, or a new version'), h('div', { class: 'card' }, save)]));
}

/**
 * Values of one version, on screen until hidden; never kept anywhere else. A region named by its
 * title: given the focus, a screen reader says which values are there, and reads them only when asked.
 */
function revealedBox(revealed, hide) {
  return h('div', { class: 'once', id: 'revealed', tabindex: '-1', role: 'region', 'aria-labelledby': 'revealed-title' },
    h('div', { class: 'spread' }, h('strong', { id: 'revealed-title' }, `Values of version ${revealed.version}`), h('button', { type: 'button', onclick: hide }, 'Hide')),
    h('dl', {}, Object.entries(revealed.values).map(([key, value]) => [h('dt', {}, h('code', {}, key)), h('dd', {}, h('code', {}, value))])));
}

async function secretView(org, name) {
  frame(org, 'secrets');
  const base = `/v1/orgs/${encodeURIComponent(org)}/secrets/${encodeURIComponent(name)}`;
  const { data: secret, etag: secretTag } = await api('GET', base, { etag: true });
  const usage = await api('GET', `${base}/usage`);
  const keysOf = (keys) => (keys === null ? 'all keys' : keys.join(', '));
  // Every change says which version it expects: a change made meanwhile by someone else is a 412, not lost.
  const ifMatch = { 'if-match': secretTag };
  const revealArea = h('div');
  /** Where a refused restore of a version says so: above the versions. */
  const versionsProblem = h('div');
  /** `opener`: the Reveal pressed, which gets the focus back when the values are hidden. */
  const reveal = async (version, opener) => {
    await act(null, revealArea, async () => {
      const revealed = await api('POST', `${base}/reveal`, { body: version === undefined ? {} : { version } });
      fill(revealArea, revealedBox(revealed, () => {
        fill(revealArea);
        (opener?.isConnected ? opener : document.getElementById('reveal'))?.focus();
      }));
    });
    // The values (or the refusal) show at the top, in sight of a Reveal far down in the versions.
    revealArea.firstElementChild?.focus({ preventScroll: true });
    revealArea.scrollIntoView({ block: 'nearest' });
  };
  const setKey = onSubmit(h('form', { id: 'set-key' },
    h('label', {}, 'Key', h('input', { name: 'key', required: true, spellcheck: 'false' })),
    h('label', {}, 'Value', h('input', { name: 'value', type: 'password', required: true, autocomplete: 'off' })),
    h('button', { type: 'submit', class: 'primary' }, 'Set')), async (form) => {
    const saved = await api('PATCH', base, { headers: ifMatch, body: { set: { [String(form.get('key')).trim()]: String(form.get('value')) } } });
    notify(saved.result === 'unchanged' ? 'That key already has this value: no new version.' : `Saved as version ${saved.version}.`);
    render();
  });
  const unset = (key) => (e) => {
    if (!confirm(`Remove ${key} from ${secret.name}? A new version is made without it.`)) return;
    act(e.target, e.target.closest('.card'), async () => {
      const saved = await api('PATCH', base, { headers: ifMatch, body: { unset: [key] } });
      notify(`${key} removed: version ${saved.version}.`);
      render();
    });
  };
  const remove = h('button', { type: 'button', class: 'danger', onclick: (e) => {
    if (!confirm(`Delete ${secret.name}? It can be restored for a while (Secrets → Deleted).`)) return;
    act(e.target, e.target.closest('.card'), async () => {
      await api('DELETE', base, { headers: ifMatch });
      notify(`Secret ${secret.name} deleted; it can be restored from the deleted list.`);
      location.hash = `#/o/${encodeURIComponent(org)}/secrets?deleted=true`;
    });
  } }, 'Delete secret');
  const destroy = h('button', { type: 'button', class: 'danger', onclick: (e) => {
    if (!confirm(`Delete ${secret.name} permanently? Every version's values are destroyed now: nothing can restore it, and deployments that pinned a version of it cannot run again.`)) return;
    act(e.target, e.target.closest('.card'), async () => {
      await api('DELETE', base, { headers: ifMatch, query: { permanent: 'true' } });
      notify(`Secret ${secret.name} deleted permanently.`);
      location.hash = `#/o/${encodeURIComponent(org)}/secrets`;
    });
  } }, 'Delete permanently');
  page(`Secret ${secret.name}`,
    h('div', { class: 'card' },
      h('div', { class: 'spread' }, h('span', {}, `Version ${secret.version} · updated `, when(secret.updatedAt)),
        h('div', { class: 'row' }, offered('admin', h('button', { type: 'button', id: 'reveal', onclick: (e) => reveal(undefined, e.currentTarget) }, 'Reveal values')), offered('developer', remove), offered('admin', destroy))),
      revealArea,
      table(['Key', ''], secret.keys.map((key) => h('tr', {}, h('td', {}, h('code', {}, key)),
        h('td', {}, offered('developer', h('button', { type: 'button', class: 'danger', 'aria-label': `Remove ${key}`, onclick: unset(key) }, 'Remove'))))), 'No keys.')),
    offered('developer', [h('h2', {}, 'Set a key'), h('div', { class: 'card' }, setKey)]),
    h('h2', {}, 'Versions'), versionsProblem,
    pagedList((cursor) => api('GET', `${base}/versions`, { query: { cursor } }),
      (p) => table(['Version', 'Keys', 'Made by', 'When', ''], p.versions.map((v) => h('tr', {},
        h('td', {}, v.version), h('td', {}, v.keys.map((k) => [h('code', {}, k), ' '])), h('td', {}, v.createdBy ?? '—'), h('td', {}, when(v.createdAt)),
        h('td', {}, h('div', { class: 'row' },
          offered('admin', h('button', { type: 'button', 'aria-label': `Reveal version ${v.version}`, onclick: (e) => reveal(v.version, e.currentTarget) }, 'Reveal')),
          v.version === secret.version || !may('admin') ? null : h('button', { type: 'button', 'aria-label': `Restore version ${v.version}`, onclick: (e) => act(e.target, versionsProblem, async () => {
            const saved = await api('POST', `${base}/restore`, { headers: ifMatch, body: { version: v.version } });
            notify(saved.result === 'unchanged' ? 'Those are the current values already.' : `Version ${v.version} restored as version ${saved.version}.`);
            render();
          }) }, 'Restore'))))))),
    h('h2', {}, 'Used by'),
    h('p', { class: 'muted' }, 'Services and environments that name it (their next deployments pin its current version), and the deployments queued, running or serving that pinned a version of it.'),
    table(['Used by', 'Name', 'Keys or versions', 'State'], [
      ...usage.services.map((u) => h('tr', {}, h('td', {}, 'service'), h('td', {}, link(u.name, 'o', org, 'services', u.name)), h('td', {}, keysOf(u.keys)), h('td', {}))),
      ...usage.environments.map((u) => h('tr', {}, h('td', {}, 'environment'), h('td', {}, link(u.name, 'o', org, 'environments', u.name)), h('td', {}, keysOf(u.keys)), h('td', {}))),
      ...usage.deployments.map((d) => h('tr', {}, h('td', {}, 'deployment'),
        h('td', {}, link(d.id, 'o', org, 'deployments', d.id), ` (${d.service.name} in ${d.environment.name})`),
        h('td', {}, `version ${d.versions.join(', ')}`), h('td', {}, badge(d.state)))),
    ], 'Nothing uses it.'));
}

// ---------------------------------------------------------------------------------------------
// Service users
// ---------------------------------------------------------------------------------------------

const ROLES = ['viewer', 'developer', 'admin', 'owner', 'runner'];
/** The roles the caller may hand out: up to its own, and a runner's by an admin or owner. */
const grantable = (role) => may(role === 'runner' ? 'admin' : role);

/** A client secret, shown once with what a client needs to use it. */
function shownOnce(title, fields) {
  return h('div', { class: 'once', id: 'shown-once' },
    h('strong', {}, title), h('p', {}, 'Copy the secret now: it is not shown again.'),
    h('dl', {}, Object.entries(fields).filter(([, v]) => v !== undefined).map(([k, v]) => [h('dt', {}, k), h('dd', {}, h('code', {}, v))])));
}

async function serviceUsersView(org) {
  frame(org, 'service-users');
  const base = `/v1/orgs/${encodeURIComponent(org)}/service-users`;
  const onceArea = h('div');
  const create = onSubmit(h('form', { id: 'create-service-user' },
    h('label', {}, 'Name', h('input', { name: 'name', required: true, placeholder: 'ci-pipeline' })),
    h('label', {}, 'Role', h('select', { name: 'role' }, ROLES.filter(grantable).map((r) => h('option', { value: r, selected: r === 'developer' }, r)))),
    h('label', {}, 'Description', h('input', { name: 'description' })),
    h('button', { type: 'submit', class: 'primary' }, 'Create')), async (form) => {
    const made = await api('POST', base, { body: { name: form.get('name'), role: form.get('role'), description: form.get('description') || undefined } });
    create.reset();
    fill(onceArea, shownOnce(`Service user ${made.name} created`,
      { clientId: made.clientId, clientSecret: made.clientSecret, tokenUrl: made.tokenUrl, scope: made.scope }));
    fill(list, listing());
  });
  const userRow = (u) => {
    // An owner is an owner's to change, an instance administrator an instance administrator's.
    const manageable = (u.role !== 'owner' || may('owner')) && (!u.instanceAdmin || caller.instanceAdmin || caller.olderServer);
    const role = h('select', { 'aria-label': `Role of ${u.name}` }, ROLES.filter((r) => r === u.role || grantable(r)).map((r) => h('option', { value: r, selected: r === u.role }, r)));
    const cell = h('td');
    // The role changes on this button, not as the list changes: arrow keys on a select pass through
    // each role on the way (developer, admin, owner…), and each would have been given.
    const changeRole = h('button', { type: 'button', hidden: true, 'aria-label': `Change the role of ${u.name}` }, 'Change');
    role.addEventListener('change', () => { changeRole.hidden = role.value === u.role; });
    changeRole.addEventListener('click', async () => {
      const changed = await act(changeRole, cell, async () => {
        await api('PATCH', `${base}/${encodeURIComponent(u.id)}`, { body: { role: role.value } });
        notify(`${u.name} is now ${role.value}.`);
        return true;
      });
      // Refused: the role shown goes back to the one it has. The focus goes back to the role before
      // the button that had it is hidden.
      if (changed) u.role = role.value;
      else role.value = u.role;
      role.focus();
      changeRole.hidden = role.value === u.role;
    });
    if (manageable) cell.append(h('div', { class: 'row' },
      h('button', { type: 'button', 'aria-label': `New secret for ${u.name}`, onclick: (e) => act(e.target, cell, async () => {
        const secret = await api('POST', `${base}/${encodeURIComponent(u.id)}/secrets`, { body: {} });
        fill(onceArea, shownOnce(`New client secret for ${u.name}`, { clientId: u.clientId, clientSecret: secret.clientSecret, hint: secret.hint }));
        await redrawRow(u, cell, `New secret for ${u.name}`);
      }) }, 'New secret'),
      h('button', { type: 'button', class: u.disabled ? '' : 'danger', 'aria-label': `${u.disabled ? 'Enable' : 'Disable'} ${u.name}`, onclick: (e) => {
        const self = u.id === session()?.subject;
        if (!u.disabled && !confirm(self
          ? `Disable ${u.name}, the service user this console is signed in as? Its tokens stop working at once, this one included.`
          : `Disable ${u.name}? Its tokens stop working at once, and it gets no new ones until enabled again.`)) return;
        act(e.target, cell, async () => {
          await api('PATCH', `${base}/${encodeURIComponent(u.id)}`, { body: { disabled: !u.disabled } });
          notify(u.disabled ? `${u.name} enabled.` : `${u.name} disabled: its tokens no longer work.`);
          await redrawRow(u, cell, `${u.disabled ? 'Disable' : 'Enable'} ${u.name}`);
        });
      } }, u.disabled ? 'Enable' : 'Disable')));
    return h('tr', {},
      h('td', {}, h('strong', {}, u.name), ' ', u.disabled ? badge('disabled') : null, u.instanceAdmin ? [' ', badge('instance admin', 'protected')] : null,
        u.description ? h('div', {}, u.description) : null,
        u.role === 'runner' ? h('div', { class: 'runner-environments' }, 'Takes the deployments of ',
          u.environments === null ? 'every environment' : u.environments.map((e) => e.name).join(', ') || 'no environment that still exists') : null,
        h('div', { class: 'muted' }, h('code', {}, u.clientId))),
      h('td', {}, manageable ? h('div', { class: 'row' }, role, changeRole) : u.role),
      h('td', {}, u.secrets.map((s) => h('div', { class: 'row' }, h('code', {}, `${s.hint}…`), h('span', { class: 'muted' }, 'last used ', when(s.lastUsedAt)),
        manageable && u.secrets.length > 1 ? h('button', { type: 'button', class: 'danger', 'aria-label': `Remove the secret ${s.hint}… of ${u.name}`, onclick: (e) => {
          if (!confirm(`Remove the secret ${s.hint}… of ${u.name}? Clients using it can no longer get tokens.`)) return;
          act(e.target, cell, async () => {
            await api('DELETE', `${base}/${encodeURIComponent(u.id)}/secrets/${encodeURIComponent(s.id)}`);
            notify('Client secret removed.');
            await redrawRow(u, cell, `New secret for ${u.name}`);
          });
        } }, 'Remove') : null))),
      cell);
  };
  /**
   * Draws a user's row again as the API has it now, in place: the rest of the list (the pages
   * loaded with Load more too) stays as it is, and the focus goes to the button named, in the new row.
   */
  const redrawRow = async (u, cell, focusLabel) => {
    const row = userRow(await api('GET', `${base}/${encodeURIComponent(u.id)}`));
    cell.closest('tr').replaceWith(row);
    [...row.querySelectorAll('button')].find((b) => b.getAttribute('aria-label') === focusLabel)?.focus();
  };
  const listing = () => pagedList((cursor) => api('GET', base, { query: { cursor } }),
    (p) => table(['Service user', 'Role', 'Client secrets', ''], p.serviceUsers.map(userRow), 'No service users.'));
  const list = h('div', {}, listing());
  page('Service users', onceArea, list, offered('admin', [h('h2', {}, 'New service user'), h('div', { class: 'card' }, create)]));
}

// ---------------------------------------------------------------------------------------------
// Webhooks
// ---------------------------------------------------------------------------------------------

/** How a webhook's deliveries are going, in a few words. */
function webhookState(w) {
  const last = w.lastAttempt;
  return [badge(w.state, w.state === 'active' ? 'succeeded' : w.state === 'failing' ? 'failed' : 'cancelled'),
    last ? h('div', { class: 'muted' }, 'last attempt ', when(last.at), last.error ? `: ${last.error}` : `: ${last.status}`) : null,
    w.nextAttemptAt ? h('div', { class: 'muted' }, 'next attempt ', when(w.nextAttemptAt)) : null,
    w.disabledReason ? h('div', { class: 'muted' }, w.disabledReason) : null];
}

/** Event types and families typed as a list (commas, spaces or lines between them). */
const typesOf = (text) => String(text ?? '').split(/[\s,]+/).filter(Boolean);

async function webhooksView(org) {
  frame(org, 'webhooks');
  const base = `/v1/orgs/${encodeURIComponent(org)}/webhooks`;
  const onceArea = h('div');
  const create = onSubmit(h('form', { id: 'create-webhook' },
    h('label', {}, 'URL', h('input', { name: 'url', type: 'url', required: true, placeholder: 'https://ci.example.com/slipway-events', spellcheck: 'false' })),
    h('label', {}, 'Events', h('input', { name: 'events', placeholder: 'deployment.state_changed, secret.* (empty: every event)', spellcheck: 'false' })),
    h('label', {}, 'Description', h('input', { name: 'description' })),
    h('button', { type: 'submit', class: 'primary' }, 'Create')), async (form) => {
    const made = await api('POST', base, { body: { url: form.get('url'), events: typesOf(form.get('events')), description: form.get('description') || undefined } });
    create.reset();
    fill(onceArea, shownOnce(`Webhook ${made.id} created`, { url: made.url, secret: made.secret }));
    fill(list, listing());
  });
  const listing = () => pagedList((cursor) => api('GET', base, { query: { cursor } }),
    (p) => table(['Webhook', 'Events', 'Deliveries'], p.webhooks.map((w) => h('tr', {},
      h('td', {}, link(w.url, 'o', org, 'webhooks', w.id), w.description ? h('div', {}, w.description) : null, h('div', { class: 'muted' }, h('code', {}, w.id))),
      h('td', {}, w.events.length ? w.events.map((t) => h('div', {}, h('code', {}, t))) : h('span', { class: 'muted' }, 'every event')),
      h('td', {}, webhookState(w)))), 'No webhooks.'));
  const list = h('div', {}, listing());
  page('Webhooks', h('p', { class: 'muted' }, 'Events POSTed to a URL as they happen, signed (Standard Webhooks), in order, tried again until taken.'),
    onceArea, list, offered('admin', [h('h2', {}, 'New webhook'), h('div', { class: 'card' }, create)]));
}

async function webhookView(org, id) {
  frame(org, 'webhooks');
  const path = `/v1/orgs/${encodeURIComponent(org)}/webhooks/${encodeURIComponent(id)}`;
  const w = await api('GET', path);
  const onceArea = h('div');
  const card = h('div', { class: 'card' });
  const edit = onSubmit(h('form', { id: 'edit-webhook' },
    h('label', {}, 'URL', h('input', { name: 'url', type: 'url', required: true, value: w.url, spellcheck: 'false' })),
    h('label', {}, 'Events', h('input', { name: 'events', value: w.events.join(', '), spellcheck: 'false' })),
    h('label', {}, 'Description', h('input', { name: 'description', value: w.description })),
    h('button', { type: 'submit', class: 'primary' }, 'Save')), async (form) => {
    await api('PATCH', path, { body: { url: form.get('url'), events: typesOf(form.get('events')), description: form.get('description') } });
    notify('Webhook saved.');
    render();
  });
  fill(card,
    h('dl', {}, h('dt', {}, 'State'), h('dd', {}, webhookState(w)), h('dt', {}, 'Created'), h('dd', {}, when(w.createdAt))),
    h('div', { class: 'row' },
      h('button', { type: 'button', id: 'toggle-webhook', class: w.active ? 'danger' : '', onclick: (e) => act(e.target, card, async () => {
        await api('PATCH', path, { body: { active: !w.active } });
        notify(w.active ? 'Webhook turned off: nothing is delivered until it is turned on.' : 'Webhook turned on: it delivers from the event it stopped at.');
        render();
      }) }, w.active ? 'Turn off' : 'Turn on'),
      h('button', { type: 'button', id: 'test-webhook', onclick: (e) => act(e.target, card, async () => {
        const t = await api('POST', `${path}/test`, { body: {} });
        if (t.delivered) notify(`Test delivery ${t.eventId} taken: ${t.status} in ${t.durationMs} ms.`);
        else card.append(h('div', { class: 'problem', role: 'alert' }, h('strong', {}, 'The receiver did not take the test delivery.'), ` ${t.error} (${t.durationMs} ms; webhook-id ${t.eventId})`));
      }) }, 'Send a test'),
      h('button', { type: 'button', id: 'rotate-webhook-secret', onclick: (e) => {
        if (!confirm('Give this webhook a new signing secret? Deliveries carry a signature by the old one too for 24 hours.')) return;
        act(e.target, card, async () => {
          const rotated = await api('POST', `${path}/rotate-secret`, { body: {} });
          fill(onceArea, shownOnce('New signing secret', { secret: rotated.secret, 'previous secret signs until': rotated.previousSecretExpiresAt }));
        });
      } }, 'New secret'),
      h('button', { type: 'button', class: 'danger', onclick: (e) => {
        if (!confirm(`Delete the webhook to ${w.url}?`)) return;
        act(e.target, card, async () => {
          await api('DELETE', path);
          notify('The webhook is deleted.');
          location.hash = `#/o/${encodeURIComponent(org)}/webhooks`;
        });
      } }, 'Delete webhook')));
  page(`Webhook ${w.url}`, onceArea, card, h('h2', {}, 'Change'), h('div', { class: 'card' }, edit), h('h2', {}, 'Deliveries'),
    pagedList((cursor) => api('GET', `${path}/deliveries`, { query: { cursor } }),
      (p) => table(['When', 'Event', 'Attempt', 'Answer', 'Took'], p.deliveries.map((d) => h('tr', {},
        h('td', {}, when(d.createdAt)), h('td', {}, h('code', {}, d.eventType), h('div', { class: 'muted' }, h('code', {}, d.eventId))),
        h('td', {}, String(d.attempt)), h('td', {}, d.error === null ? badge(String(d.status), 'succeeded') : [badge(d.status === null ? 'no answer' : String(d.status), 'failed'), ' ', d.error]),
        h('td', {}, `${d.durationMs} ms`))), 'No deliveries yet.')));
}

// ---------------------------------------------------------------------------------------------
// Events
// ---------------------------------------------------------------------------------------------

async function eventsView(org, query) {
  frame(org, 'events');
  const type = query.get('type') ?? '';
  // What happened lately first, unless the oldest are asked for.
  const order = query.get('order') === 'oldest' ? 'oldest' : 'newest';
  const filter = h('form', { id: 'event-filter' },
    h('label', {}, 'Type', h('input', { name: 'type', value: type, placeholder: 'deployment.state_changed', spellcheck: 'false' })),
    h('label', {}, 'Order', h('select', { name: 'order' },
      h('option', { value: 'newest', selected: order === 'newest' }, 'Newest first'),
      h('option', { value: 'oldest', selected: order === 'oldest' }, 'Oldest first'))),
    h('button', { type: 'submit' }, 'Filter'));
  filter.addEventListener('submit', (event) => {
    event.preventDefault();
    const form = new FormData(filter);
    const params = new URLSearchParams();
    const value = String(form.get('type') ?? '').trim();
    if (value) params.set('type', value);
    if (form.get('order') === 'oldest') params.set('order', 'oldest');
    const search = params.toString();
    navigate(`#/o/${encodeURIComponent(org)}/events${search ? `?${search}` : ''}`);
  });
  page('Events', h('div', { class: 'card' }, filter),
    pagedList((cursor) => api('GET', `/v1/orgs/${encodeURIComponent(org)}/events`, { query: { type, order, cursor } }),
      (p) => table(['When', 'Type', 'Actor', 'Subject', 'Data'], p.events.map((e) => h('tr', {},
        h('td', {}, when(e.createdAt)), h('td', {}, h('code', {}, e.type)), h('td', {}, h('code', {}, e.actor)),
        h('td', {}, h('code', {}, `${e.subject.type} ${e.subject.id}`)),
        h('td', {}, h('code', {}, JSON.stringify(e.data))))), 'No events.')));
}

// ---------------------------------------------------------------------------------------------
// Routing
// ---------------------------------------------------------------------------------------------

const VIEWS = new Map(Object.entries({
  deployments: (org, rest, q) => rest.length ? deploymentView(org, rest[0]) : deploymentsView(org, q),
  services: (org, rest) => rest.length ? serviceView(org, rest[0]) : servicesView(org),
  environments: (org, rest) => rest.length ? environmentView(org, rest[0]) : environmentsView(org),
  runners: (org) => runnersView(org),
  secrets: (org, rest, q) => rest.length ? secretView(org, rest[0]) : secretsView(org, q),
  'service-users': (org) => serviceUsersView(org),
  webhooks: (org, rest) => rest.length ? webhookView(org, rest[0]) : webhooksView(org),
  events: (org, _rest, q) => eventsView(org, q),
}));

/** Organizations this tab has found there, by the id or slug its addresses use. */
const knownOrgs = new Set();

async function render() {
  renders += 1;
  // A notice stays for the page its action went to, not for the pages after it (sign-in included).
  if (Date.now() - noticeAt > 1_000) clearNotice();
  if (session() === null) return signInView();
  try {
    await readCaller();
    const [path, search = ''] = location.hash.replace(/^#/, '').split('?');
    const query = new URLSearchParams(search);
    const parts = path.split('/').filter(Boolean).map((s) => decodeURIComponent(s));
    const view = parts[0] === 'o' && parts[1] ? VIEWS.get(parts[2] ?? 'deployments') : undefined;
    if (view) {
      // An organization that is not there (or not the caller's) gets its 404, not a page of empty lists.
      if (!knownOrgs.has(parts[1])) {
        try {
          await api('GET', `/v1/orgs/${encodeURIComponent(parts[1])}`);
        } catch (error) {
          if (error instanceof Problem && error.status === 404) frame(null);
          throw error;
        }
        knownOrgs.add(parts[1]);
      }
      await view(parts[1], parts.slice(3), query);
    }
    else if (parts.length === 0) await orgsView();
    else throw new Problem(404, { title: 'No such page', detail: `The console has no page at ${location.hash}.` });
  } catch (error) {
    if (quiet(error)) return;
    // A page the API refused is that page: headed and titled after the refusal, the focus on it.
    const box = problemBox(error);
    box.setAttribute('tabindex', '-1');
    const title = error instanceof Problem ? error.body?.title ?? 'Refused' : 'Something went wrong';
    fill($main, h('h1', {}, title), box, h('p', {}, link('Back to your organizations', '')));
    document.title = [title, shownOrg, 'Slipway'].filter(Boolean).join(' · ');
    box.focus({ preventScroll: true });
  }
}

// The skip link goes to the page's heading (or, without one, the page itself): its `#main` is not
// a view's address, and following it would draw the page "No such page".
function focusPage() {
  const target = $main.querySelector('h1') ?? $main;
  if (!target.hasAttribute('tabindex')) target.setAttribute('tabindex', '-1');
  target.focus();
}
document.getElementById('skip').addEventListener('click', (event) => {
  event.preventDefault();
  focusPage();
});

window.addEventListener('hashchange', render);
render();
