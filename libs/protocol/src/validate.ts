import type { TSchema } from '@sinclair/typebox';
import { TypeCompiler, type TypeCheck } from '@sinclair/typebox/compiler';
import {
  LABEL_MAX_CODE_POINTS,
  TITLE_MAX_CODE_POINTS,
  CrowdAct,
  CrowdBuy,
  CrowdGuess,
  CrowdSell,
  CrowdStake,
  GameAttach,
  GameDeclare,
  GameDetach,
  GameState,
  RoundCancel,
  RoundOpen,
  RoundSettle,
  type CrowdInbound as CrowdMsg,
  type GameInbound as GameMsg,
  type MultiGameInbound as MultiGameMsg,
} from './messages.ts';
import { CrowdplayError } from './errors.ts';

// One checker per message type (not the union), so an error names the field that is wrong. Each is compiled on first
// use, not when the module loads: compiling runs `new Function`, which a browser page importing the protocol (the
// hosted viewer client) would otherwise need CSP's 'unsafe-eval' for, although it never validates inbound frames.
const CROWD = new Map<string, TSchema>([
  ['act', CrowdAct],
  ['stake', CrowdStake],
  ['buy', CrowdBuy],
  ['sell', CrowdSell],
  ['guess', CrowdGuess],
]);
const GAME = new Map<string, TSchema>([
  ['declare', GameDeclare],
  ['state', GameState],
  ['round.open', RoundOpen],
  ['round.settle', RoundSettle],
  ['round.cancel', RoundCancel],
]);
const MULTI_GAME = new Map<string, TSchema>([...GAME, ['attach', GameAttach], ['detach', GameDetach]]);
const compiled = new Map<TSchema, TypeCheck<TSchema>>();
function checkerOf(schema: TSchema): TypeCheck<TSchema> {
  let c = compiled.get(schema);
  if (!c) {
    c = TypeCompiler.Compile(schema);
    compiled.set(schema, c);
  }
  return c;
}

/**
 * Parses and validates one inbound text frame from a client of `role`.
 *
 * @param raw the frame as received (UTF-8 text)
 * @returns the typed message
 * @throws CrowdplayError CP_ERR_PROTO_MALFORMED (not JSON / not an object),
 *   CP_ERR_PROTO_UNKNOWN_TYPE (no or unknown `t`), CP_ERR_PROTO_INVALID (schema mismatch)
 */
export function parseInbound(role: 'crowd', raw: string): CrowdMsg;
export function parseInbound(role: 'game', raw: string): GameMsg;
/** A multi-channel game socket's frame: the game messages, `attach` and `detach`. */
export function parseInbound(role: 'multigame', raw: string): MultiGameMsg;
export function parseInbound(role: 'crowd' | 'game' | 'multigame', raw: string): CrowdMsg | MultiGameMsg {
  let value: unknown;
  try {
    value = JSON.parse(raw);
  } catch (err) {
    throw new CrowdplayError('CP_ERR_PROTO_MALFORMED', [], { cause: err });
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new CrowdplayError('CP_ERR_PROTO_MALFORMED');
  }
  const t = (value as { t?: unknown }).t;
  const schema = typeof t === 'string' ? (role === 'crowd' ? CROWD : role === 'game' ? GAME : MULTI_GAME).get(t) : undefined;
  if (!schema) {
    throw new CrowdplayError('CP_ERR_PROTO_UNKNOWN_TYPE', [
      t === undefined ? '(no t field)' : String(t).slice(0, 32),
      role === 'crowd' ? 'crowd' : 'game',
    ]);
  }
  const check = checkerOf(schema);
  if (!check.Check(value)) {
    const first = check.Errors(value).First();
    throw new CrowdplayError('CP_ERR_PROTO_INVALID', [first ? `${first.path || '/'} ${first.message}` : 'invalid']);
  }
  if (t === 'declare' || t === 'round.open') checkLabels(value as GameMsg);
  return value as CrowdMsg | MultiGameMsg;
}

// Only separators, format characters (zero-width space and joiners among them) and combining marks: nothing to see.
const INVISIBLE = /^[\p{Z}\p{Cf}\p{M}\s]*$/u;
// C0 and C1 controls (\p{Cc}: tabs and newlines too) and the bidi controls that reorder the text around them
// (ALM, LRM, RLM, the embeddings and overrides U+202A–U+202E, the isolates U+2066–U+2069), and lone surrogates.
const FORBIDDEN_IN_LABEL = /[\p{Cc}\u061C\u200E\u200F\u202A-\u202E\u2066-\u2069]|\p{Cs}/u;

/**
 * Why `text` is not a valid display label of at most `maxCodePoints` code
 * points, or undefined when it is one. Labels are plain text: they are always
 * rendered as text, never as HTML, so markup is allowed and harmless.
 */
export function labelProblem(text: string, maxCodePoints: number): string | undefined {
  if (text.trim() === '') return 'is blank';
  if (INVISIBLE.test(text)) return 'has no visible character';
  let n = 0;
  for (const _ of text) n++;
  if (n > maxCodePoints) return `is ${n} code points (at most ${maxCodePoints})`;
  if (FORBIDDEN_IN_LABEL.test(text)) return 'contains a control or bidi-override character';
  return undefined;
}

/**
 * Checks the display labels of a `declare` or `round.open` past its schema:
 * code points counted (not UTF-16 units), no control or bidi-override
 * characters, and every labelled id one of the message's options or outcomes.
 * @throws CrowdplayError CP_ERR_LABEL_INVALID naming the field
 */
export function checkLabels(msg: GameMsg): void {
  const fail = (path: string, why: string): never => {
    throw new CrowdplayError('CP_ERR_LABEL_INVALID', [path, why]);
  };
  const check = (path: string, text: string | undefined, max: number): void => {
    if (text === undefined) return;
    const why = labelProblem(text, max);
    if (why) fail(path, why);
  };
  const checkMap = (path: string, labels: Record<string, string> | undefined, ids: readonly string[] | undefined): void => {
    if (labels === undefined) return;
    for (const [id, text] of Object.entries(labels)) {
      if (!ids?.includes(id)) fail(`${path}/${id}`, `names no ${path.endsWith('optionLabels') ? 'option' : 'outcome'} "${id}"`);
      check(`${path}/${id}`, text, LABEL_MAX_CODE_POINTS);
    }
  };
  if (msg.t === 'declare') {
    msg.actions.forEach((a, i) => {
      check(`/actions/${i}/label`, a.label, LABEL_MAX_CODE_POINTS);
      checkMap(`/actions/${i}/optionLabels`, a.optionLabels, a.options);
    });
  } else if (msg.t === 'round.open') {
    check('/title', msg.title, TITLE_MAX_CODE_POINTS);
    checkMap('/labels', msg.labels, msg.outcomes);
  }
}

/**
 * The `seq` (crowd), `ref` and `channel` (game) of a frame that failed `parseInbound`,
 * when it is a JSON object carrying valid ones, so the refusal can answer the
 * request it refuses (an ack for `seq`, an error frame with `ref`).
 * Parses `raw` again: call it on the error path only.
 */
export function inboundContext(raw: string): { seq?: number; ref?: string; channel?: string } {
  let v: unknown;
  try {
    v = JSON.parse(raw);
  } catch {
    return {};
  }
  if (typeof v !== 'object' || v === null) return {};
  const { seq, ref, channel } = v as { seq?: unknown; ref?: unknown; channel?: unknown };
  const out: { seq?: number; ref?: string; channel?: string } = {};
  if (typeof channel === 'string' && /^[A-Za-z0-9_-]{1,64}$/.test(channel)) out.channel = channel;
  if (typeof seq === 'number' && Number.isSafeInteger(seq) && seq >= 0) out.seq = seq;
  if (typeof ref === 'string' && /^[A-Za-z0-9_.:-]{1,64}$/.test(ref)) out.ref = ref;
  return out;
}
