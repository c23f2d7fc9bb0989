// The create page: a person types a topic and a note and presses Create.
// Pressing it makes one intent (client.js); the intent lives in this tab's
// sessionStorage until its outcome is definite, so a double click, Enter
// twice or a reload go on with the same key instead of making a new one.
//
// The fields are compared with the unfinished intent when Create is
// pressed, not while they are typed: the same bytes are the same intent,
// with the same key. Other bytes are a new intent, but the unfinished one
// is not left unseen: the page first asks the outcome route what became of
// it, and says so. An intent is its user's: Sign out ends it, after
// offering to check its status, so the next user of the tab never sees or
// sends it.
import { askForName, bodyOf, call, getJSON, nameProblem, newIntent, renew, resolve, roomToken, send, sleep, token } from './client.js';

const $ = (id) => document.getElementById(id);
const store = {
  intent: () => JSON.parse(sessionStorage.getItem('demo-api.intent') || 'null'),
  save: (intent) => sessionStorage.setItem('demo-api.intent', JSON.stringify(intent)),
  drop: () => sessionStorage.removeItem('demo-api.intent'),
};

let busy = false; // an intent is being sent from this page
let refused = null; // the fields the server last refused: sending them again would get the same answer
let shown = 0; // the outcome on show; a poll for an older one stops

const fields = () => ({ topic: $('topic').value, note: $('note').value });
const sameFields = (a, b) => a.topic === b.topic && a.note === b.note;
// sameIntent: the fields make the intent's very bytes.
const sameIntent = (intent, f) => intent.body === bodyOf(f);

// switches are the workshop headers the next intent's first attempt sends.
function switches() {
  const h = {};
  if ($('switch-delay').value) h['Workshop-Delay'] = $('switch-delay').value;
  if ($('switch-drop').checked) h['Workshop-Drop-Response'] = 'true';
  if ($('switch-fail').checked) h['Workshop-Fail'] = 'after-claim';
  return h;
}

function setBusy(b) {
  busy = b;
  for (const el of $('create-form').querySelectorAll('input, textarea, select, button')) el.disabled = b;
  $('check-status').disabled = b;
  $('send-again').disabled = b;
  $('sign-out').disabled = b; // an intent in flight is ended by its outcome, not by a sign out
}

function notice(text) {
  $('notice').textContent = text;
}

// Attempt log: one row per attempt, as demo-api send prints it.
function clearLog() {
  $('attempts').tBodies[0].replaceChildren();
}

function logLine(line) {
  const row = $('attempt-row').content.firstElementChild.cloneNode(true);
  const cells = row.children;
  cells[0].textContent = String(line.n);
  cells[1].textContent = line.seen;
  cells[2].textContent = `${line.elapsedMs} ms`;
  cells[3].textContent = line.decision;
  $('attempts').tBodies[0].append(row);
}

// show puts an outcome on the page: a title, name/value details, and which
// of the two buttons apply. It returns the outcome's number.
function show(title, details, { check = false, again = false } = {}) {
  $('outcome').hidden = false;
  $('outcome').dataset.state = title.toLowerCase().replaceAll(' ', '-');
  $('outcome-title').textContent = title;
  $('outcome-details').replaceChildren(...details.map(([name, value]) => detail(name, value)));
  $('check-status').hidden = !check;
  $('send-again').hidden = !again;
  return ++shown;
}

function detail(name, value) {
  const row = $('detail-row').content.firstElementChild.cloneNode(true);
  row.querySelector('dt').textContent = name;
  const dd = row.querySelector('dd');
  dd.dataset.name = name;
  dd.textContent = String(value);
  return row;
}

function setDetail(name, value) {
  const dd = $('outcome-details').querySelector(`dd[data-name="${name}"]`);
  if (dd) dd.textContent = value;
}

function showCreated(request, how) {
  const n = show('Created', [
    ['requestId', request.requestId],
    ['answer', how],
    ['topic', request.topic],
    ['note', request.note],
    ['state', request.state],
    ['delivery', request.delivery || 'pending'],
  ]);
  followDelivery(n, request.requestId, request.delivery || 'pending');
}

// followDelivery shows the hand-over to the review desk as it moves from
// its state when shown, for at most 30 s.
async function followDelivery(n, id, from) {
  const seen = [from];
  for (const end = Date.now() + 30000; Date.now() < end && n === shown && seen.at(-1) === 'pending'; ) {
    try {
      const d = await getJSON(`/v1/demo-requests/${encodeURIComponent(id)}/delivery`, token.get());
      if (n !== shown) return;
      if (d.state !== seen.at(-1)) seen.push(d.state);
      setDetail('delivery', seen.join(' → '));
      if (d.state !== 'pending') return;
    } catch {
      // The next read may get through.
    }
    await sleep(500);
  }
}

function showRefused(status, problem) {
  show('Refused', [
    ['status', status],
    ['code', problem.code || ''],
    ['title', problem.title || ''],
    ['detail', problem.detail || ''],
  ]);
}

function showUnknown(intent, more = []) {
  show('Outcome unknown', [
    ['key', intent.key],
    ['attempts', intent.attempts],
    ...more,
    ['next', 'Check status asks the server what became of this key; it never sends the create again.'],
  ], { check: true });
}

// exclusive runs fn while this browser sends no other intent, in any tab
// (the Web Locks API, in a secure context such as localhost). With wait
// false it does not queue: fn(false) says another tab is sending.
function exclusive(wait, fn) {
  if (!navigator.locks) return fn(true);
  return navigator.locks.request('demo-api sending', { ifAvailable: !wait }, (lock) => fn(lock !== null));
}

// go sends the intent and shows where it ends. The caller has set busy.
async function go(intent) {
  store.save(intent); // before the first request: a reload finds it
  $('outcome').hidden = true;
  shown++;
  clearLog();
  intent.log.forEach(logLine);
  try {
    const res = await send(intent, {
      token: token.get(),
      save: store.save,
      log: (line) => {
        intent.log.push(line);
        store.save(intent);
        logLine(line);
      },
    });
    if (res.kind === 'unknown') {
      intent.unknown = true;
      store.save(intent);
      showUnknown(intent, [['last', res.last || 'no attempt']]);
      return;
    }
    store.drop();
    if (res.kind === 'created') {
      // The intent is done: the form is cleared for the next one, so a
      // late second click finds nothing to send.
      $('topic').value = '';
      $('note').value = '';
      showCreated(res.request, res.replayed ? `${res.status}, replayed (it existed already)` : `${res.status}`);
    } else {
      refused = intent.fields;
      showRefused(res.status, res.problem);
    }
  } finally {
    setBusy(false);
  }
}

function onCreate(event) {
  event.preventDefault();
  if (busy) return; // a second press while the intent is in flight
  const f = fields();
  if (refused && sameFields(refused, f)) {
    notice('The server refused these fields; it would refuse them again. Change a field to make a new intent.');
    return;
  }
  setBusy(true);
  $('outcome').hidden = true;
  shown++;
  exclusive(false, async (alone) => {
    if (!alone) {
      setBusy(false);
      notice('Another tab of this browser is sending an intent: wait for its outcome.');
      return;
    }
    $('earlier').hidden = true;
    let intent = store.intent();
    if (intent && sameIntent(intent, f)) {
      // The same bytes as an intent whose outcome is not known: the same
      // intent, the same key.
      notice(`The same fields as the unfinished intent: sending it again with key ${intent.key}.`);
      if (intent.unknown || Date.now() >= intent.deadline) renew(intent); // a budget given up is renewed
      intent.unknown = false;
    } else {
      if (intent && !(await settle(intent))) {
        setBusy(false);
        return;
      }
      intent = newIntent(f, switches());
      notice(`New intent: key ${intent.key}.`);
    }
    await go(intent);
  });
}

// settle asks the outcome route what became of an unfinished intent that
// the user is leaving for other fields, says so, and forgets the intent.
// When the route cannot be asked, the intent is kept and settle returns
// false: nothing is left unseen.
async function settle(intent) {
  const was = `The unfinished intent with key ${intent.key} (topic "${intent.fields.topic}")`;
  let o;
  try {
    o = await resolve(intent.key, token.get());
  } catch (err) {
    notice(`${was} is kept: what became of it could not be asked (${err.message}). Press Create to ask again, or Check status.`);
    showUnknown(intent);
    return false;
  }
  let what;
  if (o.state === 'completed' && o.status >= 200 && o.status < 300 && o.resultId) {
    what = `was created: request ${o.resultId}.`;
  } else if (o.state === 'completed') {
    what = `was refused (${o.status}).`;
  } else if (o.state === 'in_progress') {
    what = `is still running on the server (lease ${o.leaseRemainingSeconds} s left): it may yet be created.`;
  } else {
    what = 'was never seen by the server (or it expired): it did not happen.';
  }
  store.drop();
  $('earlier').textContent = `${was} ${what} The changed fields are a new intent.`;
  $('earlier').hidden = false;
  return true;
}

async function onCheckStatus() {
  const intent = store.intent();
  if (!intent || busy) return;
  setBusy(true);
  try {
    const o = await resolve(intent.key, token.get());
    if (o.state === 'completed') {
      store.drop();
      if (o.status >= 200 && o.status < 300 && o.resultId) {
        const request = await getJSON(`/v1/demo-requests/${encodeURIComponent(o.resultId)}`, token.get());
        showCreated(request, `${o.status}, the stored answer of key ${intent.key}`);
      } else {
        show('Refused', [['status', o.status], ['key', intent.key], ['detail', 'the stored answer of this key is a refusal']]);
      }
    } else if (o.state === 'in_progress') {
      showUnknown(intent, [['status', `still in progress (lease ${o.leaseRemainingSeconds} s left): check again`]]);
    } else {
      show('Outcome unknown', [
        ['key', intent.key],
        ['status', 'never seen (or expired): the create did not happen under this key'],
        ['next', 'Send again sends the same intent with the same key.'],
      ], { again: true });
    }
  } catch (err) {
    showUnknown(intent, [['status', `could not ask: ${err.message}`]]);
  } finally {
    setBusy(false);
  }
}

function onSendAgain() {
  const intent = store.intent();
  if (!intent || busy) return;
  // The fields show what is sent: the intent's bytes, whatever was typed since.
  $('topic').value = intent.fields.topic;
  $('note').value = intent.fields.note;
  renew(intent);
  intent.unknown = false;
  setBusy(true);
  exclusive(true, () => go(intent));
}

function signedIn(yes) {
  $('sign-in').hidden = yes;
  $('create').hidden = !yes;
  $('sign-out').hidden = !yes;
  $('leaving').hidden = true;
}

// onSignOut signs out at once, unless an intent of this user is unfinished:
// then it offers to check its status first, or to leave it.
function onSignOut() {
  if (busy) return;
  const intent = store.intent();
  if (!intent) {
    signOut();
    return;
  }
  $('leaving-text').textContent = `Your intent with key ${intent.key} (topic "${intent.fields.topic}") is unfinished: ` +
    'what became of it is not known here. Check its status first, or sign out and leave it: ' +
    'the next user of this tab will not see it or send it.';
  $('create').hidden = true;
  $('leaving').hidden = false;
}

// signOut ends the user's session in this tab, and everything of theirs
// the page holds: the token, an unfinished intent, the fields, the last
// outcome and its attempts.
function signOut() {
  store.drop();
  token.drop();
  refused = null;
  shown++;
  $('topic').value = '';
  $('note').value = '';
  $('outcome').hidden = true;
  $('earlier').hidden = true;
  notice('');
  clearLog();
  signedIn(false);
}

// room is true on a workshop room's server: sign-in asks for a name.
let room = false;

async function start() {
  $('sign-in-form').addEventListener('submit', (event) => {
    event.preventDefault();
    const v = $('token').value.trim();
    token.set(room ? roomToken(v) : v);
    $('token').value = '';
    signedIn(true);
    resume();
  });
  $('sign-out').addEventListener('click', onSignOut);
  $('leaving-check').addEventListener('click', () => {
    $('leaving').hidden = true;
    $('create').hidden = false;
    onCheckStatus();
  });
  $('leaving-confirm').addEventListener('click', signOut);
  $('leaving-cancel').addEventListener('click', () => {
    $('leaving').hidden = true;
    $('create').hidden = false;
  });
  $('create-form').addEventListener('submit', onCreate);
  $('check-status').addEventListener('click', onCheckStatus);
  $('send-again').addEventListener('click', onSendAgain);
  try {
    const got = await call('GET', '/ui/config.json');
    const config = JSON.parse(got.body);
    $('switches').hidden = !config.workshop;
    room = Boolean(config.room);
    if (room) {
      askForName($('token'), $('token-label'), $('token-hint'));
      // The form refuses a name the server would refuse, in the server's
      // words, and warns of a name lab machines share.
      const hint = $('token-hint').textContent;
      $('token').addEventListener('input', () => {
        const problem = nameProblem($('token').value.trim(), config);
        $('token').setCustomValidity(problem && problem.refused ? problem.text : '');
        $('token-hint').textContent = problem && !problem.refused ? problem.text : hint;
      });
    }
  } catch {
    // Without the config the switches stay hidden.
  }
  signedIn(Boolean(token.get()));
  if (token.get()) resume();
}

// resume takes up an intent a reload interrupted: within its deadline it
// goes on with the same key and the next attempt number; past it, its
// outcome is unknown.
function resume() {
  const intent = store.intent();
  if (!intent || busy) return;
  $('topic').value = intent.fields.topic;
  $('note').value = intent.fields.note;
  if (intent.unknown || Date.now() >= intent.deadline) {
    clearLog();
    intent.log.forEach(logLine);
    showUnknown(intent);
    return;
  }
  notice(`Resuming the unfinished intent with key ${intent.key}, attempt ${intent.attempts + 1}.`);
  setBusy(true);
  exclusive(true, () => go(intent));
}

start();
