// The workshop page: one button per branch of the contract. The steps, and
// what each must show, come from steps.json, the list demo-api workshop
// walks too; each step here makes its exchanges from this browser and
// checks the answers the way the terminal's does.
import { askForName, call, nameProblem, newKey, roomName, roomToken, sleep, token } from './client.js';

const $ = (id) => document.getElementById(id);
const body = JSON.stringify({ topic: 'workshop', note: 'shown step by step' });

let config = {};
const created = []; // the requests the steps created, in order

// skip marks a step that cannot run against this server.
class Skip extends Error {}

// Step is one run of one step: its keys, and where its exchanges show.
class Step {
  constructor(name, out) {
    this.name = name;
    this.out = out;
    this.run = newKey().slice(0, 8); // a tag in every key, so a step can run again
  }

  key(name) {
    return `ws-${this.run}-${name}`;
  }

  note(text) {
    const p = document.createElement('div');
    p.className = 'exchange';
    p.textContent = text;
    this.out.append(p);
  }

  // send makes one request and shows it and its answer as a person reads
  // them. It returns {status, header, body, dropped}.
  async send(method, path, { key, body: reqBody, headers = {} } = {}) {
    const h = { Authorization: `Bearer ${token.get()}`, ...headers };
    if (reqBody) h['Content-Type'] = 'application/json';
    if (key) h['Idempotency-Key'] = key;
    const lines = [`> ${method} ${path}`];
    for (const [k, v] of Object.entries(h)) lines.push(`> ${k}: ${k === 'Authorization' ? 'Bearer •••' : v}`);
    if (reqBody) lines.push(`> ${reqBody}`);
    const box = document.createElement('div');
    box.className = 'exchange';
    const request = document.createElement('div');
    request.textContent = lines.join('\n');
    const response = document.createElement('div');
    response.className = 'response';
    response.textContent = '< …';
    box.append(request, response);
    this.out.append(box);
    let got;
    try {
      got = await call(method, path, { headers: h, body: reqBody, timeoutMs: 30000 });
    } catch (err) {
      response.textContent = `< (no answer: ${err.message})`;
      return { dropped: true, status: 0, header: new Headers(), body: '' };
    }
    const out = [`< ${got.status} ${got.statusText}`];
    got.header.forEach((v, k) => {
      if (!['date', 'content-length'].includes(k)) out.push(`< ${k}: ${v}`);
    });
    if (got.body) out.push(`< ${got.body.trim()}`);
    response.textContent = out.join('\n');
    return { ...got, dropped: false };
  }

  async create(key, reqBody, headers) {
    const e = await this.send('POST', '/v1/demo-requests', { key, body: reqBody, headers });
    const id = requestID(e);
    if (e.status === 201 && id && !created.includes(id)) created.push(id);
    return e;
  }
}

function json(e) {
  try {
    return JSON.parse(e.body);
  } catch {
    return {};
  }
}

const code = (e) => json(e).code || '';
const requestID = (e) => json(e).requestId || '';

// expect checks an answer's status and, for a problem, its code.
function expect(e, status, wantCode = '') {
  if (e.dropped) throw new Error(`no answer, want ${status} ${wantCode}`);
  if (e.status === 400 && code(e) === 'workshop_disabled') {
    throw new Error('the server refuses the workshop knobs: start it with WORKSHOP=true (make run does)');
  }
  if (e.status !== status || (wantCode && code(e) !== wantCode)) {
    throw new Error(`got ${e.status} ${code(e)}, want ${status} ${wantCode}`);
  }
}

function check(ok, message) {
  if (!ok) throw new Error(message);
}

const steps = {
  async claim(w) {
    const e = await w.create(w.key('claim'), body);
    expect(e, 201);
    check(e.header.get('Location') && !e.header.get('Idempotent-Replayed'), 'a first answer must carry Location and no Idempotent-Replayed');
  },

  async replay(w) {
    const first = await w.create(w.key('replay'), body);
    const again = await w.create(w.key('replay'), body);
    expect(again, first.status);
    check(first.body === again.body && again.header.get('Idempotent-Replayed') === 'true',
      'the replay must be the first body byte for byte, with Idempotent-Replayed: true');
  },

  async mismatch(w) {
    await w.create(w.key('mismatch'), body);
    const e = await w.create(w.key('mismatch'), JSON.stringify({ topic: 'another topic' }));
    expect(e, 422, 'key_payload_mismatch');
    check((e.header.get('Link') || '').includes('rel="describedby"'), 'a mismatch must link to its documentation (rel=describedby)');
  },

  async 'in-progress'(w) {
    const key = w.key('in-progress');
    // The first request holds its claim for delayMs, below half the lease.
    const delayMs = Math.min(3000, (config.leaseSeconds || 30) * 400);
    const first = w.create(key, body, { 'Workshop-Delay': `${delayMs}ms` });
    await sleep(delayMs / 3);
    const busy = await w.create(key, body);
    expect(busy, 409, 'operation_in_progress');
    check(busy.header.get('Retry-After') && (busy.header.get('Link') || '').includes('rel="monitor"'),
      'a 409 must carry Retry-After and a monitor Link to the key\'s outcome');
    const waited = await w.create(key, body, { Prefer: `wait=${Math.ceil(delayMs / 1000) + 5}` });
    const owner = await first;
    expect(waited, 201);
    check(waited.header.get('Preference-Applied') === 'wait' && waited.body === owner.body,
      'with Prefer: wait the retry must get the first answer, with Preference-Applied: wait');
  },

  async 'lost-response'(w) {
    const key = w.key('lost');
    const lost = await w.create(key, body, { 'Workshop-Drop-Response': 'true' });
    check(lost.dropped, `got ${lost.status}, want the connection closed without an answer`);
    const e = await w.create(key, body);
    expect(e, 201);
    check(e.header.get('Idempotent-Replayed') === 'true', 'the request was created before the answer was lost: the retry must be a replay');
  },

  async transient(w) {
    const key = w.key('transient');
    expect(await w.create(key, body, { 'Workshop-Fail': 'after-claim' }), 503, 'unavailable');
    const again = await w.create(key, body);
    expect(again, 201);
    check(!again.header.get('Idempotent-Replayed'), 'a released claim stores nothing: the retry must run as a first request');
  },

  async refusal(w) {
    const key = w.key('refusal');
    const blocked = JSON.stringify({ topic: 'blocked' });
    const e = await w.create(key, blocked);
    expect(e, 422, 'topic_refused');
    const again = await w.create(key, blocked);
    check(again.body === e.body && again.header.get('Idempotent-Replayed') === 'true', 'a refusal is an answer: the retry must replay it');
  },

  async 'bad-request'(w) {
    const e = await w.create('', body);
    expect(e, 400, 'idempotency_key_missing');
    check((e.header.get('Link') || '').includes('rel="describedby"'), 'the key\'s errors must link to their documentation (rel=describedby)');
  },

  async cancel(w) {
    const id = requestID(await w.create(w.key('cancel-create'), body));
    check(id, 'could not create a request to cancel');
    const path = `/v1/demo-requests/${id}/cancel`;
    const first = await w.send('POST', path, { key: w.key('cancel-1') });
    expect(first, 200);
    const again = await w.send('POST', path, { key: w.key('cancel-1') });
    check(again.body === first.body && again.header.get('Idempotent-Replayed') === 'true', 'the retry of the cancel must replay its 200');
    expect(await w.send('POST', path, { key: w.key('cancel-2') }), 422, 'request_not_cancellable');
  },

  async external(w) {
    const faults = async (f) => {
      const e = await w.send('PUT', '/workshop/desk-faults', { body: JSON.stringify(f) });
      if (e.status === 404 || (e.status === 400 && code(e) === 'workshop_disabled')) {
        throw new Skip(json(e).detail || 'this server passes on no desk faults: start it with WORKSHOP=true and a PROVIDER_URL whose desk has PROVIDER_FAULTS=true (make run does)');
      }
      expect(e, 200);
    };
    await faults({}); // is there a desk with its knobs?
    // What the earlier steps created is handed over first: the desk going
    // down must catch only this step's request.
    for (const id of created) await awaitDelivery(w, `/v1/demo-requests/${id}/delivery`);
    await faults({ down: true });
    try {
      const id = requestID(await w.create(w.key('external'), body));
      check(id, 'could not create a request to hand over');
      const path = `/v1/demo-requests/${id}/delivery`;
      const st = await awaitDelivery(w, path);
      check(st.state === 'unknown', `the delivery ended ${st.state}, want unknown: the desk never answered`);
      expect(await w.send('POST', `${path}/reconcile`), 503, 'unavailable');
      // Back up, the desk says it never took it: reconcile queues it again,
      // and the dispatcher sends it, once.
      await faults({});
      expect(await w.send('POST', `${path}/reconcile`), 200);
      const got = await awaitDelivery(w, path);
      check(got.state === 'submitted' && got.providerReference, `the delivery ended ${got.state}, want submitted with the desk's reference`);
    } finally {
      await faults({});
    }
  },

  async resume(w) {
    const id = requestID(await w.create(w.key('resume-create'), body));
    check(id, 'could not create a request to expedite');
    const path = `/v1/demo-requests/${id}/expedite`;
    const key = w.key('resume');
    // The runner "dies" after the slot: the connection closes without an
    // answer, and the run waits at slot_reserved with its lease ended.
    const stopped = await w.send('POST', path, { key, headers: { 'X-Client-Attempt': '1', 'Workshop-Stop-After': 'slot_reserved' } });
    if (stopped.status === 404) throw new Skip('this server has no expedite: start it with PROVIDER_URL, a review desk (make run does)');
    if (code(stopped) === 'workshop_disabled') expect(stopped, 0);
    // The browser sends a POST again on its own when a reused connection
    // closes without an answer. That resend stops where the run stands,
    // unless the server's completer took the run over first: then it is 409.
    const resent = stopped.status === 409 && code(stopped) === 'operation_in_progress';
    check(stopped.dropped || resent, `got ${stopped.status} ${code(stopped)}, want the connection closed without an answer after slot_reserved`);
    const o = await w.send('GET', `/v1/idempotency-keys/${encodeURIComponent(key)}?operation=demo-requests.expedite`);
    expect(o, 200);
    const out = json(o);
    const run = out.run || {};
    const slot = (run.references || {}).slot_reserved || '';
    if (run.attempts > 1 || resent) {
      // Within the second since the stop the server's completer took the
      // run over: it resumes it, and the retry below gets its answer.
      w.note(`(the server's completer took the run over first: it is ${run.state} at ${run.recoveryPoint})`);
    } else {
      check(out.state === 'in_progress' && run.recoveryPoint === 'slot_reserved' && run.state === 'running' && slot,
        `the outcome shows the key ${out.state}, the run ${run.state} at "${run.recoveryPoint}"; want in_progress, running at slot_reserved with the slot's reference`);
      check(out.leaseRemainingSeconds === 0, 'the stopped run must wait with its lease passed (leaseRemainingSeconds 0)');
    }
    // The retry takes the key over and resumes at the recovery point. While
    // another runner holds the run it gets 409 with Retry-After.
    let attempt = 2;
    let got;
    for (const end = Date.now() + 20000; ; attempt++) {
      got = await w.send('POST', path, { key, headers: { 'X-Client-Attempt': String(attempt) } });
      if (got.status !== 409 || Date.now() > end) break;
      const wait = Math.min(Number(got.header.get('Retry-After')) || 0, 5);
      check(wait >= 1, 'a 409 must carry Retry-After');
      w.note(`(waiting ${wait} s, as Retry-After says)`);
      await sleep(wait * 1000);
    }
    check(!(got.status === 422 && got.body.includes('insufficient_credit')),
      'the desk refused the charge: this account\'s credit is spent (start the desk afresh: make db-reset, or PROVIDER_CREDIT)');
    expect(got, 201);
    const e = json(got);
    check(e.requestId === id && e.state === 'confirmed' && e.slotReference && e.chargeReference,
      'the answer must be the confirmed order, with slotReference and chargeReference');
    check(!slot || e.slotReference === slot, `the order holds slot ${e.slotReference}, not the one reserved before the stop (${slot}): a second slot`);
    if (got.header.get('Idempotent-Replayed') === 'true' && run.attempts === 1) {
      w.note('(the server\'s completer finished the run first: the retry got its answer)');
    }
    const again = await w.send('POST', path, { key, headers: { 'X-Client-Attempt': String(attempt + 1) } });
    expect(again, 201);
    check(again.body === got.body && again.header.get('Idempotent-Replayed') === 'true',
      'the next retry must replay the 201 byte for byte, with Idempotent-Replayed: true');
    // The order as the server holds it: this page reaches only its origin,
    // not the desk.
    const order = await w.send('GET', path);
    expect(order, 200);
    const held = json(order);
    check(held.state === 'confirmed' && held.slotReference === e.slotReference && held.chargeReference === e.chargeReference,
      `the order reads ${held.state}, want confirmed with the answer's slot and charge`);
  },

  async expiry(w) {
    // With the workshop knobs the key gets a TTL of 5 s of its own
    // (Workshop-TTL); the server's stays for every other key.
    let ttl = config.ttlSeconds || 0;
    let headers = {};
    if (config.workshop) {
      ttl = 5;
      headers = { 'Workshop-TTL': `${ttl}s` };
    } else if (ttl <= 0 || ttl > 120) {
      throw new Skip('start a server with WORKSHOP=true (make run does), or with a short TTL (IDEMPOTENCY_TTL=1m)');
    }
    const key = w.key('expiry');
    const first = await w.create(key, body, headers);
    expect(first, 201);
    w.note(`(waiting ${ttl + 1} s for the record to expire)`);
    await sleep((ttl + 1) * 1000);
    const again = await w.create(key, body);
    expect(again, 201);
    check(!again.header.get('Idempotent-Replayed') && requestID(again) !== requestID(first),
      'after the TTL the key must run as a new intent, with a new requestId');
  },
};

// awaitDelivery reads the delivery at path until it is no longer pending,
// showing each change, for at most 30 s.
async function awaitDelivery(w, path) {
  w.note(`(reading ${path} until it changes)`);
  let last = '';
  for (const end = Date.now() + 30000; Date.now() < end; await sleep(250)) {
    const got = await call('GET', path, { headers: { Authorization: `Bearer ${token.get()}` } });
    check(got.status === 200, `GET ${path}: ${got.status}`);
    const st = JSON.parse(got.body);
    const seen = `< ${st.state} after ${st.attempts} attempts`;
    if (seen !== last) w.note((last = seen));
    if (st.state !== 'pending') return st;
  }
  throw new Error('the delivery did not change for 30 s: start the server with PROVIDER_URL and DISPATCH_MAX_ATTEMPTS=4 (make run does)');
}

// runStep runs one step and shows its verdict: PASS, FAIL or SKIP.
async function runStep(section, step) {
  const out = section.querySelector('.exchanges');
  const verdict = section.querySelector('.verdict');
  const button = section.querySelector('button');
  out.replaceChildren();
  button.disabled = true;
  verdict.dataset.verdict = '';
  verdict.textContent = 'running…';
  let v = 'PASS';
  let why = 'the answer is what the contract says';
  try {
    await steps[step.name](new Step(step.name, out));
  } catch (err) {
    v = err instanceof Skip ? 'SKIP' : 'FAIL';
    why = err.message;
  }
  verdict.dataset.verdict = v;
  verdict.textContent = `${v} ${why}`;
  button.disabled = false;
  return v;
}

// unmet names what a step needs (its "needs" in steps.json) that this
// server lacks, or is '' when the server has it all: a requirement met is
// not shown.
function unmet(needs) {
  switch (needs) {
    case 'workshop':
      return config.workshop ? '' : 'needs WORKSHOP=true';
    case 'ttl':
      return config.workshop || (config.ttlSeconds > 0 && config.ttlSeconds <= 120) ? '' : 'needs WORKSHOP=true, or a TTL of at most 2m';
    case 'desk':
      return config.deskFaults ? '' : 'needs the review desk\'s fault knobs';
    case 'expedite':
      return config.workshop && config.expedite ? '' : 'needs WORKSHOP=true and a review desk (PROVIDER_URL)';
    default:
      return '';
  }
}

// nameOK shows what is wrong with the name in a workshop room, and
// reports whether the steps may run with it: a name the server refuses
// would only collect a 401 a step.
function nameOK(focus = false) {
  const problem = config && config.room ? nameProblem($('token').value.trim(), config) : null;
  $('name-problem').textContent = problem ? problem.text : '';
  $('name-problem').dataset.refused = problem && problem.refused ? 'true' : '';
  $('name-problem').hidden = !problem;
  if (focus && problem && problem.refused) $('token').focus();
  return !(problem && problem.refused);
}

async function start() {
  // In a workshop room the page asks for a name: its token is dev-<name>.
  const tokenInput = $('token');
  tokenInput.value = token.get();
  tokenInput.addEventListener('input', () => {
    const v = tokenInput.value.trim();
    token.set(config.room && v ? roomToken(v) : v);
    nameOK();
  });
  $('token-form').addEventListener('submit', (event) => event.preventDefault());

  config = JSON.parse((await call('GET', '/ui/config.json')).body);
  if (config.room) {
    askForName(tokenInput, $('token-label'));
    // What the field holds (this tab's token, or a name typed before the
    // config came) becomes a name.
    const v = tokenInput.value.trim();
    const name = roomName(v) || v;
    tokenInput.value = name;
    if (name) token.set(roomToken(name));
  }
  $('server').textContent = `This server: ${config.room ? 'a workshop room, ' : ''}workshop knobs ${config.workshop ? 'on' : 'off'}, TTL ${config.ttlSeconds} s, lease ${config.leaseSeconds} s, desk faults ${config.deskFaults ? 'on' : 'off'}.`;
  const list = JSON.parse((await call('GET', '/ui/steps.json')).body);
  const sections = list.map((step) => {
    const section = $('step').content.firstElementChild.cloneNode(true);
    section.id = `step-${step.name}`;
    section.querySelector('h3').textContent = step.name;
    section.querySelector('.says').textContent = step.says;
    const needs = unmet(step.needs);
    section.querySelector('.needs').textContent = needs;
    section.querySelector('.needs').hidden = needs === '';
    section.querySelector('button').addEventListener('click', () => nameOK(true) && runStep(section, step));
    $('steps').append(section);
    return [section, step];
  });
  $('run-all').addEventListener('click', async () => {
    if (!nameOK(true)) return;
    $('run-all').disabled = true;
    $('summary').textContent = 'running…';
    const verdicts = [];
    for (const [section, step] of sections) verdicts.push(await runStep(section, step));
    const count = (v) => verdicts.filter((x) => x === v).length;
    $('summary').dataset.verdict = count('FAIL') ? 'FAIL' : 'PASS';
    $('summary').textContent = `${count('PASS')} passed, ${count('FAIL')} failed, ${count('SKIP')} skipped`;
    $('run-all').disabled = false;
  });
}

start();
