import { pino, type Logger, type LevelWithSilent, type DestinationStream } from 'pino';

export type { Logger };

/**
 * A Bot API token as it appears in a URL or a message (`<bot id>:<secret>`, after `bot` in Bot API paths, or
 * alone): a fetch error's message names the URL it failed on, and the URL holds the token.
 */
const BOT_TOKEN_RE = /(?<!\d)(\d{3,16}):[A-Za-z0-9_-]{30,}/g;

/** `line` with every Bot API token's secret part replaced (the bot id, which is public, is kept). */
export function redactBotTokens(line: string): string {
  return line.replace(BOT_TOKEN_RE, '$1:<redacted>');
}

/**
 * The process logger: pino, JSON lines on stdout, one `service` field. Every line is written with Bot API
 * tokens redacted ({@link redactBotTokens}): error messages and stacks of failed calls carry their URL.
 * @param level pino level (LOG_LEVEL)
 * @param destination where lines go (tests) @defaultValue stdout
 */
export function createLogger(opts: { level: LevelWithSilent; service: string; destination?: DestinationStream }): Logger {
  const options = { level: opts.level, base: { service: opts.service, pid: process.pid }, hooks: { streamWrite: redactBotTokens } };
  return opts.destination ? pino(options, opts.destination) : pino(options);
}
