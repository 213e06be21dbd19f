import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { waitFor } from '@herald/testing/ports';

const REDIS_BINARY = process.env.REDIS_SERVER_BINARY ?? 'redis-server';

/** A redis-server of the test's own on a fixed port, which the test may kill and start again. */
export interface OwnRedis {
  url: string;
  start(): Promise<void>;
  /** SIGKILL: no shutdown, connections drop as in a crash. */
  kill(): Promise<void>;
  cleanup(): Promise<void>;
}

export async function ownRedis(port: number): Promise<OwnRedis> {
  const dir = await mkdtemp(join(tmpdir(), 'herald-redis-'));
  let child: ChildProcess | undefined;
  const server: OwnRedis = {
    url: `redis://127.0.0.1:${port}`,
    async start() {
      child = spawn(
        REDIS_BINARY,
        ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir],
        { stdio: 'ignore' },
      );
      await waitFor(`redis-server on ${port}`, async () => {
        if (child?.exitCode !== null) throw new Error(`redis-server exited with ${child?.exitCode}`);
        const { Socket } = await import('node:net');
        return new Promise<boolean>((resolve) => {
          const socket = new Socket();
          socket.once('error', () => resolve(false));
          socket.connect(port, '127.0.0.1', () => {
            socket.write('PING\r\n');
            socket.once('data', (data) => {
              socket.destroy();
              resolve(String(data).startsWith('+PONG'));
            });
          });
        });
      });
    },
    async kill() {
      if (!child || child.exitCode !== null) return;
      const exited = once(child, 'exit');
      child.kill('SIGKILL');
      await exited;
    },
    async cleanup() {
      await server.kill();
      await rm(dir, { recursive: true, force: true });
    },
  };
  return server;
}
