/**
 * The operator listener of a process that runs services (`crowdplay start`, `crowdplay service <name>`, a gateway
 * included): a small HTTP server on `HEALTH_HOST:HEALTH_PORT` (loopback by default) for orchestrators (k8s probes)
 * and Prometheus, and the process's run-until-signal lifecycle that drives it. A gateway also serves /healthz and
 * /readyz on PORT (its probes), and /metrics there only with METRICS_ON_PORT (services/gateway/src/http.ts).
 *
 * - `GET /healthz` → 200 `{status:'ok'}` while the process runs (starting and draining included: liveness).
 * - `GET /readyz` → 200 `{ready:true}` once the services started, 503 `{ready:false, state}` before, and from the
 *   moment a drain starts (the first SIGTERM / SIGINT), so an orchestrator stops counting on it at once.
 * - `GET /metrics` → Prometheus text of the process's telemetry (503 `{ready:false, state}` until started).
 * - any other path → 404 `{code:'CP_ERR_HTTP_NOT_FOUND', message}`; another method on one of these → 405
 *   `{code:'CP_ERR_HTTP_METHOD_NOT_ALLOWED', message}` with `Allow: GET, HEAD`, as on the gateway's port.
 *
 * What node's HTTP parser refuses is answered as on the gateway's port (`clientErrors`): a request not received whole
 * within HTTP_REQUEST_TIMEOUT_MS gets 408 CP_ERR_LIMIT_REQUEST_TIMEOUT and its connection is closed, so a client that
 * trickles a request does not hold a connection; counted in crowdplay_refusals_total{area="http"} once the process's
 * services have started (their telemetry is what /metrics serves).
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { listenError, type Config } from '@crowdplay/config';
import { CrowdplayError } from '@crowdplay/protocol';
import { clientErrors, requestDeadlineOptions } from '@crowdplay/gateway';
import type { Telemetry } from '@crowdplay/telemetry';
import type { Running } from './compose.ts';

/** `starting` (not serving yet) → `ready` → `draining` (a signal arrived; never goes back). */
export type HealthState = 'starting' | 'ready' | 'draining';

/** The health server of one process. */
export interface HealthServer {
  /** The port it listens on (the one asked, or the one picked for 0). */
  readonly port: number;
  readonly state: HealthState;
  /**
   * Services started: /readyz 200, /metrics served by `metrics`, refused requests counted in `refusals` (the services'
   * telemetry). Ignored once draining, but for `refusals`.
   */
  setReady(metrics: () => Promise<string>, refusals?: Pick<Telemetry['refusals'], 'refuse'>): void;
  /** A drain started: /readyz 503 from now on (/healthz stays 200). */
  setDraining(): void;
  close(): Promise<void>;
}

const JSON_TYPE = 'application/json; charset=utf-8';
/** The paths this listener serves (GET and HEAD only). */
const HEALTH_PATHS: ReadonlySet<string> = new Set(['/healthz', '/readyz', '/metrics']);
const PROMETHEUS_TYPE = 'text/plain; version=0.0.4; charset=utf-8';

/**
 * Starts the health server on `host:port` (`port` 0 = any free port, for tests).
 * @param o.requestTimeoutMs the deadline of a whole request, ms (HTTP_REQUEST_TIMEOUT_MS)
 * @throws (rejects) CrowdplayError CP_ERR_CONFIG_INVALID naming HEALTH_PORT or HEALTH_HOST when the address cannot be
 *   used (EADDRINUSE, EACCES, EADDRNOTAVAIL), else the listen error
 */
export async function startHealthServer(o: { host: string; port: number; requestTimeoutMs: number }): Promise<HealthServer> {
  let state: HealthState = 'starting';
  let metrics: (() => Promise<string>) | undefined;
  const server = createServer(requestDeadlineOptions(o.requestTimeoutMs), (req, res) => {
    const send = (status: number, type: string, body: string): void => {
      res.writeHead(status, { 'content-type': type, 'cache-control': 'no-store' }).end(body);
    };
    const path = (req.url ?? '/').split('?')[0] ?? '/';
    const notFound = (): void =>
      send(404, JSON_TYPE, JSON.stringify({ code: 'CP_ERR_HTTP_NOT_FOUND', message: `no route ${req.method} ${path.slice(0, 200)}` }));
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      if (!HEALTH_PATHS.has(path)) return notFound();
      const method = String(req.method).slice(0, 16);
      refusals?.refuse('http', 'CP_ERR_HTTP_METHOD_NOT_ALLOWED', { url: path, method });
      const e = new CrowdplayError('CP_ERR_HTTP_METHOD_NOT_ALLOWED', [method, 'GET, HEAD']);
      res.setHeader('allow', 'GET, HEAD');
      return send(e.httpStatus, JSON_TYPE, JSON.stringify({ code: e.code, message: e.message }));
    }
    if (path === '/healthz') return send(200, JSON_TYPE, JSON.stringify({ status: 'ok' }));
    if (path === '/readyz')
      return state === 'ready'
        ? send(200, JSON_TYPE, JSON.stringify({ ready: true }))
        : send(503, JSON_TYPE, JSON.stringify({ ready: false, state }));
    if (path === '/metrics') {
      if (!metrics) return send(503, JSON_TYPE, JSON.stringify({ ready: false, state }));
      metrics().then(
        (text) => send(200, PROMETHEUS_TYPE, text),
        () => send(500, JSON_TYPE, JSON.stringify({ code: 'CP_ERR_INTERNAL', message: 'internal error' })),
      );
      return;
    }
    notFound();
  });
  let refusals: Pick<Telemetry['refusals'], 'refuse'> | undefined;
  server.on('clientError', clientErrors({ refusals: { refuse: (...a) => refusals?.refuse(...a) } }, o.requestTimeoutMs));
  server.keepAliveTimeout = 5_000;
  await new Promise<void>((resolve, reject) => {
    const refused = (err: unknown): void => reject(listenError(err, { portSetting: 'HEALTH_PORT', hostSetting: 'HEALTH_HOST', ...o }));
    server.once('error', refused);
    server.listen(o.port, o.host, () => {
      server.off('error', refused);
      resolve();
    });
  });
  return {
    port: (server.address() as AddressInfo).port,
    get state() {
      return state;
    },
    setReady(m, r) {
      refusals = r;
      metrics = m;
      if (state === 'starting') state = 'ready';
    },
    setDraining() {
      state = 'draining';
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** What {@link runUntilSignal} needs from the process (tests pass fakes). */
export interface ProcessLike {
  on(signal: 'SIGTERM' | 'SIGINT', listener: (sig: NodeJS.Signals) => void): unknown;
  exit(code: number): void;
}

/**
 * Starts the services (`start`), logs `ready` (what `crowdplay cluster` and the tests wait for), and on the first
 * SIGTERM / SIGINT turns `health` (if any) to draining, then drains (`Running.stop()`): exit 0 when it finishes,
 * 1 when it fails or passes SHUTDOWN_DEADLINE_MS (`config.gateway.shutdownMs`); a second signal exits 130 at once.
 * @returns the running services, once started
 * @throws whatever `start` throws (the health server, if any, is closed first)
 */
export async function runUntilSignal(
  config: Config,
  start: () => Promise<Running>,
  o: { health?: HealthServer; proc?: ProcessLike } = {},
): Promise<Running> {
  const proc: ProcessLike = o.proc ?? process;
  let running: Running;
  try {
    running = await start();
  } catch (err) {
    await o.health?.close();
    throw err;
  }
  o.health?.setReady(() => running.telemetry.metrics.prometheusText(), running.telemetry.refusals);
  running.telemetry.logger.info({ port: running.port, healthPort: o.health?.port }, 'ready');
  let signals = 0;
  const onSignal = (sig: NodeJS.Signals): void => {
    if (++signals > 1) return proc.exit(130); // a second signal: exit at once
    o.health?.setDraining(); // before anything else: readiness is false from the first moment of the drain
    running.telemetry.logger.info({ signal: sig }, 'draining');
    const deadline = setTimeout(() => {
      running.telemetry.logger.error({ shutdownMs: config.gateway.shutdownMs }, 'drain passed SHUTDOWN_DEADLINE_MS: exiting');
      proc.exit(1);
    }, config.gateway.shutdownMs);
    deadline.unref();
    running.stop().then(
      () => {
        clearTimeout(deadline);
        proc.exit(0);
      },
      () => {
        clearTimeout(deadline);
        proc.exit(1);
      },
    );
  };
  proc.on('SIGTERM', onSignal);
  proc.on('SIGINT', onSignal);
  return running;
}
