import { execFile } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { chown, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);
const PG_BIN = process.env.POSTGRES_BIN_DIR ?? debianPostgresBinDir();

/** Debian installs each major version under /usr/lib/postgresql/<major>/bin: take the newest. */
function debianPostgresBinDir(): string {
  const majors = readdirSync('/usr/lib/postgresql', { withFileTypes: true })
    .filter((entry) => entry.isDirectory() && /^\d+$/.test(entry.name))
    .map((entry) => Number(entry.name))
    .sort((a, b) => b - a);
  if (majors.length === 0)
    throw new Error('no PostgreSQL server binaries in /usr/lib/postgresql; set POSTGRES_BIN_DIR');
  return `/usr/lib/postgresql/${majors[0]}/bin`;
}
/** PostgreSQL refuses to run as root; tests here run as root, so the cluster runs as this user. */
const CLUSTER_USER = 'postgres';
/** initdb and a start on a busy 2-core machine. */
const PG_CTL_TIMEOUT_S = 60;

/**
 * A PostgreSQL cluster of the test's own (initdb in a temp dir, its own port, 127.0.0.1 only) that the
 * test may stop and start again: an outage of the whole server, never of the shared one.
 */
export interface OwnPostgres {
  /** DATABASE_URL of the cluster's `postgres` database (trust auth, user postgres). */
  url: string;
  start(): Promise<void>;
  /** `pg_ctl stop -m fast`: connections are terminated, as in a restart or failover. */
  stop(): Promise<void>;
  /**
   * SIGSTOP to the server and every backend: connections stay open and nothing answers (a hung host, a
   * partition that drops packets). {@link thaw} resumes them.
   */
  freeze(): Promise<void>;
  thaw(): Promise<void>;
  cleanup(): Promise<void>;
}

export async function ownPostgres(port: number): Promise<OwnPostgres> {
  const dir = await mkdtemp(join(tmpdir(), 'herald-pg-'));
  const asRoot = process.getuid?.() === 0;
  const exec = (binary: string, args: string[]) =>
    asRoot
      ? run('runuser', ['-u', CLUSTER_USER, '--', join(PG_BIN, binary), ...args])
      : run(join(PG_BIN, binary), args);
  if (asRoot) {
    const { stdout } = await run('id', ['-u', CLUSTER_USER]);
    const { stdout: gid } = await run('id', ['-g', CLUSTER_USER]);
    await chown(dir, Number(stdout.trim()), Number(gid.trim()));
  }
  const data = join(dir, 'data');
  await exec('initdb', ['-D', data, '-A', 'trust', '-U', 'postgres', '--no-sync', '--no-instructions']);
  let running = false;
  /** The postmaster and its children (backends, background workers). */
  const signalServer = async (signal: NodeJS.Signals) => {
    if (!running) return;
    const postmaster = Number((await readFile(join(data, 'postmaster.pid'), 'utf8')).split('\n')[0]);
    const { stdout } = await run('pgrep', ['-P', String(postmaster)]).catch(() => ({ stdout: '' }));
    const pids = [postmaster, ...stdout.split('\n').filter(Boolean).map(Number)];
    // Stop the parent first so it cannot fork a fresh child meanwhile; resume children first.
    for (const pid of signal === 'SIGSTOP' ? pids : pids.reverse()) process.kill(pid, signal);
  };
  const server: OwnPostgres = {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    async start() {
      const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=50`;
      await exec('pg_ctl', [
        '-D',
        data,
        '-o',
        options,
        '-l',
        join(dir, 'log'),
        '-t',
        String(PG_CTL_TIMEOUT_S),
        '-w',
        'start',
      ]);
      running = true;
    },
    async stop() {
      if (!running) return;
      await exec('pg_ctl', ['-D', data, '-m', 'fast', '-t', String(PG_CTL_TIMEOUT_S), '-w', 'stop']);
      running = false;
    },
    freeze: () => signalServer('SIGSTOP'),
    thaw: () => signalServer('SIGCONT'),
    async cleanup() {
      await signalServer('SIGCONT').catch(() => {});
      if (running) {
        await exec('pg_ctl', ['-D', data, '-m', 'immediate', '-w', 'stop']).catch(() => {});
        running = false;
      }
      await rm(dir, { recursive: true, force: true });
    },
  };
  return server;
}
