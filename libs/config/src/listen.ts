/**
 * A listen error in the words of the settings that chose the address: the port or host a setting names cannot be
 * used on this machine, which is a setting that cannot work (CP_ERR_CONFIG_INVALID, exit 2 from the CLI).
 */
import { CrowdplayError } from '@crowdplay/protocol';

/** Which settings chose a listener's address, and the address. */
export interface ListenAddress {
  /** The port's setting, e.g. `PORT` or `HEALTH_PORT`. */
  portSetting: string;
  /** The host's setting, e.g. `HOST` or `HEALTH_HOST`. */
  hostSetting: string;
  host: string;
  port: number;
}

/**
 * `err` from a listen (`server.listen`, fastify's `listen`) as CP_ERR_CONFIG_INVALID naming the setting to change
 * when the address cannot be used: EADDRINUSE (the port is taken), EACCES (a privileged port), EADDRNOTAVAIL (the
 * host is not an address of this machine). Any other error is returned as it is.
 * @param err the listen's error
 * @param a the settings and the address asked for
 * @returns the error to throw
 */
export function listenError(err: unknown, a: ListenAddress): unknown {
  const code = (err as { code?: unknown } | null)?.code;
  const where = `${a.host.includes(':') ? `[${a.host}]` : a.host}:${a.port}`;
  const why =
    code === 'EADDRINUSE'
      ? `${a.portSetting}: ${where} is in use by another process (EADDRINUSE); stop it or set ${a.portSetting} to a free port`
      : code === 'EACCES'
        ? `${a.portSetting}: ${where} needs a privilege this process does not have (EACCES); set ${a.portSetting} to 1024 or above`
        : code === 'EADDRNOTAVAIL'
          ? `${a.hostSetting}: ${a.host} is not an address of this machine (EADDRNOTAVAIL)`
          : null;
  return why === null ? err : new CrowdplayError('CP_ERR_CONFIG_INVALID', [why], { cause: err });
}
