// The client's half of the Idempotency-Key contract, for the browser. These
// are the Go client's rules (api/client), written down once for both in the
// README ("The client side"):
//
//   - one key per intent, made once when the user confirms the fields, kept
//     with the exact body bytes until a definite answer;
//   - one time budget per intent, a timeout per attempt inside it;
//   - jittered exponential backoff between attempts, never shortened to fit
//     the budget: no attempt starts with less than minAttemptMs of it left;
//     Retry-After honoured only as far as the budget allows;
//   - X-Client-Attempt: n on each attempt, and Prefer: wait while the attempt
//     has time to wait;
//   - retried with the same key and bytes: no answer, a timeout, 409
//     operation_in_progress, 429, 500, 502, 503, 504. Anything else is
//     definite and never retried;
//   - the budget spent with no definite answer is "outcome unknown": ask the
//     outcome route (resolve), never send again with a new key.

export const rules = {
  budgetMs: 5000,
  attemptTimeoutMs: 2000,
  minAttemptMs: 250, // the least time left worth starting an attempt with
  backoff: { initialMs: 100, multiplier: 2, jitter: 0.5, maxMs: 1000 },
};

export const createPath = '/v1/demo-requests';

// token is the bearer token of this tab, kept in sessionStorage: never in
// the URL, never in a log.
export const token = {
  get: () => sessionStorage.getItem('demo-api.token') || '',
  set: (t) => sessionStorage.setItem('demo-api.token', t),
  drop: () => sessionStorage.removeItem('demo-api.token'),
};

// roomPrefix starts the token of every participant of a workshop room
// (WORKSHOP_ROOM): there the pages ask for a name, and dev-<name> is the
// token.
const roomPrefix = 'dev-';

// askForName turns the page's token field into a name field, for a
// workshop room: label, input and hint say so, and the field shows the
// name of the token this tab holds.
export function askForName(input, label, hint) {
  label.textContent = 'Your name';
  input.type = 'text';
  input.placeholder = 'a short lowercase name';
  input.pattern = namePattern;
  if (hint) hint.textContent = 'A workshop room: sign in with a short lowercase name of your own; your token is dev-<name>, and your keys and desk faults are yours alone.';
}

const namePattern = '[a-z0-9][a-z0-9._\\-]{0,31}';

// nameProblem says what is wrong with a participant's name before anything
// is sent: {refused: true, text} with the server's rule of names
// (config.nameRule) for a name the server refuses, {refused: false, text}
// for a name lab machines share (config.sharedNames), whose keys anyone
// else of that name shares, or null for a name of one's own.
export function nameProblem(name, config) {
  if (!new RegExp(`^(?:${namePattern})$`).test(name)) {
    return { refused: true, text: `${name ? `"${name}" is not a name here` : 'Enter your name'}: ${config.nameRule}` };
  }
  if ((config.sharedNames || []).includes(name)) {
    return { refused: false, text: `"${name}" is a name lab machines share: anyone else who picks it shares your keys and desk faults. Pick a name of your own.` };
  }
  return null;
}

// roomToken is the token of the participant name.
export const roomToken = (name) => roomPrefix + name;

// roomName is the name in a participant's token t, or '' for another token.
export const roomName = (t) => (t.startsWith(roomPrefix) ? t.slice(roomPrefix.length) : '');

export const createOperation = 'demo-requests.create';

// retryable reports whether an answer is worth sending again with the same
// key: the request did not run (409 operation_in_progress, 429, 503), ran
// and was released (500), or a proxy could not reach the server (502, 504).
export function retryable(status, code) {
  if (status === 409) return code === 'operation_in_progress';
  return [429, 500, 502, 503, 504].includes(status);
}

// newKey makes a random key. crypto.randomUUID exists only in a secure
// context (https, or localhost); a room reaching the host by its address
// over plain http gets the same UUID form from getRandomValues.
export function newKey() {
  if (crypto.randomUUID) return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const h = [...b].map((x) => x.toString(16).padStart(2, '0')).join('');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

// bodyOf is the exact body of the intent of fields: the same fields make
// the same bytes, so an intent is recognised by its body.
export function bodyOf(fields) {
  return JSON.stringify({ topic: fields.topic, note: fields.note });
}

// newIntent makes the intent of fields: its key, the exact body every
// attempt sends, and its deadline. headers go on its first attempt only
// (the workshop switches).
export function newIntent(fields, headers = {}, now = Date.now()) {
  return {
    key: newKey(),
    fields: { topic: fields.topic, note: fields.note },
    body: bodyOf(fields),
    headers,
    started: now,
    deadline: now + rules.budgetMs,
    attempts: 0, // the attempts sent so far, across reloads
    log: [],
  };
}

// renew gives an intent whose outcome is known not to have happened a new
// budget, with the same key and bytes.
export function renew(intent, now = Date.now()) {
  intent.started = now;
  intent.deadline = now + rules.budgetMs;
}

function backoff() {
  let current = rules.backoff.initialMs;
  return () => {
    const j = rules.backoff.jitter * current;
    const next = current - j + Math.random() * 2 * j;
    current = Math.min(current * rules.backoff.multiplier, rules.backoff.maxMs);
    return Math.round(next);
  };
}

// nextWait decides the wait before the next attempt, with leftMs of the
// budget after the last one, and whether that attempt is made at all
// (again). The wait is the backoff's, or the server's Retry-After when
// longer. The backoff's wait is never shortened to squeeze in one more
// attempt: when it would leave that attempt less than minAttemptMs, there
// is none, so the end of a budget is no burst of attempts against a server
// that is down. A Retry-After past the budget is shortened (never below the
// backoff's wait) to leave a whole last attempt: the attempt timeout, or
// half of what is left.
export function nextWait(backoffMs, retryAfterMs, leftMs) {
  let wait = backoffMs;
  if (retryAfterMs > wait) {
    wait = Math.max(backoffMs, Math.min(retryAfterMs, leftMs - Math.min(rules.attemptTimeoutMs, leftMs / 2)));
  }
  return { wait, again: leftMs - wait >= rules.minAttemptMs };
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// send spends the intent's budget on attempts until a definite answer, and
// returns one of:
//
//   {kind: 'created', request, status, replayed, waited}
//   {kind: 'refused', status, problem}
//   {kind: 'unknown', last}
//
// save(intent) is called before each attempt, so that a reload finds the
// attempt count; log(line) after each attempt is decided.
export async function send(intent, { token, save, log }) {
  const next = backoff();
  let last = '';
  for (;;) {
    const left = intent.deadline - Date.now();
    if (left < rules.minAttemptMs) return { kind: 'unknown', last };
    const n = ++intent.attempts;
    save(intent);
    const a = await attempt(intent, n, Math.min(left, rules.attemptTimeoutMs), token);
    const line = { n, seen: a.seen, elapsedMs: Date.now() - intent.started };
    if (a.outcome) {
      log({ ...line, decision: a.outcome.kind === 'created' ? 'done' : 'stop: a definite answer, not retried' });
      return a.outcome;
    }
    last = a.seen;
    const { wait, again } = nextWait(next(), a.retryAfterMs, intent.deadline - Date.now());
    if (!again) {
      log({ ...line, decision: 'give up: budget spent' });
      return { kind: 'unknown', last };
    }
    log({ ...line, decision: `retry in ${Math.round(wait)}ms` });
    await sleep(wait);
  }
}

// attempt sends the intent once, within timeoutMs, and returns what it
// saw, and its outcome when the answer is definite.
async function attempt(intent, n, timeoutMs, token) {
  const headers = {
    Authorization: `Bearer ${token}`,
    'Content-Type': 'application/json',
    'Idempotency-Key': intent.key,
    'X-Client-Attempt': String(n),
  };
  // Wait for a running first attempt rather than take a 409, as long as the
  // answer can still arrive within this attempt.
  const wait = Math.floor((timeoutMs - 500) / 1000);
  if (wait >= 1) headers.Prefer = `wait=${wait}`;
  if (n === 1) Object.assign(headers, intent.headers);
  let got;
  try {
    got = await call('POST', createPath, { headers, body: intent.body, timeoutMs });
  } catch (err) {
    return { seen: noAnswer(err), retryAfterMs: 0 };
  }
  const { status, header, body } = got;
  if (status >= 200 && status < 300) {
    const request = parseJSON(body);
    if (!request || typeof request.requestId !== 'string' || request.requestId === '') {
      const problem = { title: 'The server broke the contract', code: 'contract_broken', status,
        detail: `a ${status} answer without a requestId` };
      return { seen: `${status}`, outcome: { kind: 'refused', status, problem } };
    }
    return {
      seen: `${status}`,
      outcome: { kind: 'created', status, request, replayed: header.get('Idempotent-Replayed') === 'true',
        waited: header.get('Preference-Applied') === 'wait' },
    };
  }
  const problem = parseJSON(body) || {};
  const seen = problem.code ? `${status} ${problem.code}` : `${status}`;
  if (!retryable(status, problem.code)) {
    return { seen, outcome: { kind: 'refused', status, problem } };
  }
  const secs = Number.parseInt(header.get('Retry-After') || '', 10);
  return { seen, retryAfterMs: secs > 0 ? secs * 1000 : 0 };
}

function noAnswer(err) {
  return err && err.name === 'TimeoutError' ? 'no answer (timed out)' : `no answer (${err && err.message})`;
}

function parseJSON(text) {
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}

// call makes one request to this origin and reads its whole answer within
// timeoutMs. It throws on no answer (a TimeoutError after timeoutMs).
export async function call(method, path, { headers = {}, body, timeoutMs = 10000 } = {}) {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(new DOMException('timed out', 'TimeoutError')), timeoutMs);
  try {
    const resp = await fetch(path, { method, headers, body, signal: ctl.signal, cache: 'no-store', credentials: 'omit' });
    return { status: resp.status, statusText: resp.statusText, header: resp.headers, body: await resp.text() };
  } finally {
    clearTimeout(timer);
  }
}

function authorized(token) {
  return { Authorization: `Bearer ${token}` };
}

// resolve asks the outcome route what became of key. It never sends the
// create. It returns {state: 'completed', status, resultId},
// {state: 'in_progress', leaseRemainingSeconds} or {state: 'unknown'}.
export async function resolve(key, token) {
  const path = `/v1/idempotency-keys/${encodeURIComponent(key)}?operation=${createOperation}`;
  const got = await call('GET', path, { headers: authorized(token), timeoutMs: rules.attemptTimeoutMs });
  if (got.status === 404) return { state: 'unknown' };
  const body = parseJSON(got.body);
  if (got.status !== 200 || !body) {
    throw new Error(`the outcome route answered ${got.status}${body && body.code ? ` ${body.code}` : ''}`);
  }
  return body;
}

// getJSON reads one of the caller's resources, or throws.
export async function getJSON(path, token) {
  const got = await call('GET', path, { headers: authorized(token), timeoutMs: rules.attemptTimeoutMs });
  const body = parseJSON(got.body);
  if (got.status !== 200 || !body) throw new Error(`GET ${path} answered ${got.status}`);
  return body;
}
