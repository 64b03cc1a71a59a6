import { TypeCompiler } from '@sinclair/typebox/compiler';
import { CrowdAct, GameDeclare, GameState, type CrowdInbound as CrowdMsg, type GameInbound as GameMsg } from './messages.ts';
import { CrowdplayError } from './errors.ts';

// One compiled checker per message type (not the union), so an error names the field that is wrong.
const CROWD = new Map([['act', TypeCompiler.Compile(CrowdAct)]]);
const GAME = new Map<string, ReturnType<typeof TypeCompiler.Compile>>([
  ['declare', TypeCompiler.Compile(GameDeclare)],
  ['state', TypeCompiler.Compile(GameState)],
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
