/**
 * Where integration suites find PostgreSQL, Redis and NATS.
 *
 * When a container runtime answers, testcontainers starts one container of
 * each per test process. Otherwise (this machine, CI here) the suites use the
 * services named by DATABASE_URL / REDIS_URL / NATS_URL, defaulting to the
 * ones every machine of this kind runs. The runtime probe has a deadline: a
 * socket that accepts but never answers would otherwise hang the suite.
 */
import { existsSync } from 'node:fs';
import { request } from 'node:http';

export interface ServiceUrls {
  databaseUrl: string;
  redisUrl: string;
  natsUrl: string;
  /** `containers` when testcontainers started them, else `local`. */
  source: 'containers' | 'local';
}

const DEFAULTS = {
  databaseUrl: 'postgresql://postgres@127.0.0.1:5432/test',
  redisUrl: 'redis://127.0.0.1:6379',
  natsUrl: 'nats://127.0.0.1:4222',
};

/** True when a Docker-compatible runtime answers `GET /_ping` within `deadlineMs`. */
export async function containerRuntimeAnswers(deadlineMs = 1_500): Promise<boolean> {
  const host = process.env.DOCKER_HOST;
  let socketPath: string | undefined = '/var/run/docker.sock';
  let hostOpts: { host: string; port: number } | undefined;
  if (host?.startsWith('unix://')) socketPath = host.slice('unix://'.length);
  else if (host?.startsWith('tcp://')) {
    const u = new URL(host.replace('tcp://', 'http://'));
    hostOpts = { host: u.hostname, port: Number(u.port || 2375) };
    socketPath = undefined;
  }
  if (socketPath && !existsSync(socketPath)) return false;
  return new Promise((resolve) => {
    const req = request({ ...(socketPath ? { socketPath } : hostOpts), path: '/_ping', method: 'GET', timeout: deadlineMs }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    });
    req.on('timeout', () => {
      req.destroy();
      resolve(false);
    });
    req.on('error', () => resolve(false));
    req.end();
  });
}

let cached: Promise<ServiceUrls> | undefined;
let stopContainers: (() => Promise<void>) | undefined;

/** The service URLs for this test process (containers started at most once). */
export function serviceUrls(): Promise<ServiceUrls> {
  cached ??= resolveUrls();
  return cached;
}

async function resolveUrls(): Promise<ServiceUrls> {
  const local: ServiceUrls = {
    databaseUrl: process.env.DATABASE_URL || DEFAULTS.databaseUrl,
    redisUrl: process.env.REDIS_URL || DEFAULTS.redisUrl,
    natsUrl: process.env.NATS_URL || DEFAULTS.natsUrl,
    source: 'local',
  };
  if (process.env.CROWDPLAY_TEST_CONTAINERS === 'off' || !(await containerRuntimeAnswers())) return local;
  const { GenericContainer } = await import('testcontainers');
  const { PostgreSqlContainer } = await import('@testcontainers/postgresql');
  const [pgc, redis, nats] = await Promise.all([
    new PostgreSqlContainer('postgres:16-alpine').withDatabase('test').start(),
    new GenericContainer('redis:7-alpine').withExposedPorts(6379).start(),
    new GenericContainer('nats:2.10-alpine').withCommand(['-js']).withExposedPorts(4222).start(),
  ]);
  stopContainers = async () => {
    await Promise.all([pgc.stop(), redis.stop(), nats.stop()]);
  };
  return {
    databaseUrl: pgc.getConnectionUri(),
    redisUrl: `redis://${redis.getHost()}:${redis.getMappedPort(6379)}`,
    natsUrl: `nats://${nats.getHost()}:${nats.getMappedPort(4222)}`,
    source: 'containers',
  };
}

/** Stops containers started by serviceUrls() (no-op for local services). */
export async function stopServices(): Promise<void> {
  await stopContainers?.();
}
