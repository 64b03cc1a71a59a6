import { pino, type Logger, type LevelWithSilent } from 'pino';

export type { Logger };

/**
 * The process logger: pino, JSON lines on stdout, one `service` field.
 * @param level pino level (LOG_LEVEL)
 */
export function createLogger(opts: { level: LevelWithSilent; service: string }): Logger {
  return pino({ level: opts.level, base: { service: opts.service, pid: process.pid } });
}
