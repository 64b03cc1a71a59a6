/**
 * The streamer overlay's query string (`GET /overlay?channel=C&theme=…#token=…`): what OBS's browser source
 * opens. Every parameter is checked before the page is served, so a typo is named in a 400 instead of
 * guessed at: `channel` (required, a channel id), `token` (optional, a viewer JWT; the page reads a token from
 * the URL fragment first, where a read-only watch token belongs: the fragment never reaches the server; without
 * one the page asks standalone's dev-token route), `theme` (optional, `dark` or `light`: the colour of the text).
 * A watch token in the query is refused with a 400 that says to move it to the fragment.
 */
import { CHANNEL_ID_RE, CrowdplayError } from '@crowdplay/protocol';

/** How a read-only watch token starts (libs/store WATCH_TOKEN_PREFIX; not imported: this module loads no database driver). */
const WATCH_TOKEN_PREFIX = 'cpw_';

/** Where the gateway serves the overlay page. */
export const OVERLAY_PATH = '/overlay';

/** The overlay's parameters and the values each accepts. */
const PARAMS: Record<string, { test: (v: string) => boolean; want: string }> = {
  channel: { test: (v) => CHANNEL_ID_RE.test(v), want: 'a channel id (^[A-Za-z0-9_-]{1,64}$)' },
  token: { test: (v) => /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/.test(v) && v.length <= 4_096, want: 'a viewer JWT' },
  theme: { test: (v) => v === 'dark' || v === 'light', want: 'dark or light' },
};

/**
 * Checks the overlay's query string.
 * @param query the parsed query (fastify's: a value is a string, or an array when the parameter repeats)
 * @throws CrowdplayError CP_ERR_PROTO_INVALID naming the first unknown, repeated, malformed or missing parameter
 */
export function checkOverlayQuery(query: unknown): void {
  const q = (typeof query === 'object' && query !== null ? query : {}) as Record<string, unknown>;
  for (const [name, value] of Object.entries(q)) {
    const spec = PARAMS[name];
    const shown = name.slice(0, 40);
    if (!spec)
      throw new CrowdplayError('CP_ERR_PROTO_INVALID', [`unknown overlay parameter "${shown}" (known: ${Object.keys(PARAMS).join(', ')})`]);
    if (typeof value !== 'string') throw new CrowdplayError('CP_ERR_PROTO_INVALID', [`overlay parameter "${shown}" given more than once`]);
    if (name === 'token' && value.startsWith(WATCH_TOKEN_PREFIX))
      throw new CrowdplayError('CP_ERR_PROTO_INVALID', [
        'a watch token goes in the URL fragment (/overlay?channel=C#token=cpw_…), not the query',
      ]);
    if (!spec.test(value)) throw new CrowdplayError('CP_ERR_PROTO_INVALID', [`overlay parameter "${shown}" must be ${spec.want}`]);
  }
  if (q.channel === undefined) throw new CrowdplayError('CP_ERR_PROTO_INVALID', ['overlay parameter "channel" is required']);
}
