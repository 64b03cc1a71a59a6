import type { TSchema } from '@sinclair/typebox';
import { TypeCompiler, type TypeCheck } from '@sinclair/typebox/compiler';
import {
  CrowdAct,
  CrowdBuy,
  CrowdGuess,
  CrowdSell,
  CrowdStake,
  GameDeclare,
  GameState,
  RoundCancel,
  RoundOpen,
  RoundSettle,
  type CrowdInbound as CrowdMsg,
  type GameInbound as GameMsg,
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
export function parseInbound(role: 'crowd' | 'game', raw: string): CrowdMsg | GameMsg {
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
  const schema = typeof t === 'string' ? (role === 'crowd' ? CROWD : GAME).get(t) : undefined;
  if (!schema) {
    throw new CrowdplayError('CP_ERR_PROTO_UNKNOWN_TYPE', [t === undefined ? '(no t field)' : String(t).slice(0, 32), role]);
  }
  const check = checkerOf(schema);
  if (!check.Check(value)) {
    const first = check.Errors(value).First();
    throw new CrowdplayError('CP_ERR_PROTO_INVALID', [first ? `${first.path || '/'} ${first.message}` : 'invalid']);
  }
  return value as CrowdMsg | GameMsg;
}

/**
 * The `seq` (crowd) and `ref` (game) of a frame that failed `parseInbound`,
 * when it is a JSON object carrying valid ones, so the refusal can answer the
 * request it refuses (an ack for `seq`, an error frame with `ref`).
 * Parses `raw` again: call it on the error path only.
 */
export function inboundContext(raw: string): { seq?: number; ref?: string } {
  let v: unknown;
  try {
    v = JSON.parse(raw);
  } catch {
    return {};
  }
  if (typeof v !== 'object' || v === null) return {};
  const { seq, ref } = v as { seq?: unknown; ref?: unknown };
  const out: { seq?: number; ref?: string } = {};
  if (typeof seq === 'number' && Number.isSafeInteger(seq) && seq >= 0) out.seq = seq;
  if (typeof ref === 'string' && /^[A-Za-z0-9_.:-]{1,64}$/.test(ref)) out.ref = ref;
  return out;
}
