import { TypeCompiler } from '@sinclair/typebox/compiler';
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

// One compiled checker per message type (not the union), so an error names the field that is wrong.
const CROWD = new Map<string, ReturnType<typeof TypeCompiler.Compile>>([
  ['act', TypeCompiler.Compile(CrowdAct)],
  ['stake', TypeCompiler.Compile(CrowdStake)],
  ['buy', TypeCompiler.Compile(CrowdBuy)],
  ['sell', TypeCompiler.Compile(CrowdSell)],
  ['guess', TypeCompiler.Compile(CrowdGuess)],
]);
const GAME = new Map<string, ReturnType<typeof TypeCompiler.Compile>>([
  ['declare', TypeCompiler.Compile(GameDeclare)],
  ['state', TypeCompiler.Compile(GameState)],
  ['round.open', TypeCompiler.Compile(RoundOpen)],
  ['round.settle', TypeCompiler.Compile(RoundSettle)],
  ['round.cancel', TypeCompiler.Compile(RoundCancel)],
]);

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
  const check = typeof t === 'string' ? (role === 'crowd' ? CROWD : GAME).get(t) : undefined;
  if (!check) {
    throw new CrowdplayError('CP_ERR_PROTO_UNKNOWN_TYPE', [t === undefined ? '(no t field)' : String(t).slice(0, 32), role]);
  }
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
