/**
 * `--scenarios webhooks`: the raw keep-alive POST loop and the raw durable loop trials, taking turns
 * with the dispatcher runs (backlog, warm, two dispatchers, several endpoints, steady rate), then the
 * scheduler pass; returns the whole {@link WebhookResult}.
 */
import { randomBytes } from 'node:crypto';
import { signWebhook } from '@herald/webhooks';
import { machineCpuSince, machineSample, round, spread, stopChild } from '../common.js';
import type { LoopCommand, LoopResult } from '../post-loop.js';
import type { ReceiverStats } from '../webhook-receiver.js';
import { forkChild, POST_LOOP, startReceiver } from './children.js';
import { runDispatcher } from './dispatcher-run.js';
import {
  besideRatio,
  type DispatcherRun,
  type MultiEndpointResult,
  type RawLoopTrial,
  type WebhookConfig,
  type WebhookResult,
} from './results.js';
import { measureSchedulerPass } from './scheduler-pass.js';

export async function runWebhooks(config: WebhookConfig): Promise<WebhookResult> {
  const { log } = config;
  const { receiver, origin } = await startReceiver();
  const loop = forkChild(POST_LOOP);
  try {
    // Raw keep-alive POST loop: the same kind of signed body, signed once.
    const secret = `whsec_${randomBytes(24).toString('base64url')}`;
    const eventId = `evt_${randomBytes(12).toString('hex')}`;
    const body = JSON.stringify({
      id: eventId,
      type: 'post.published',
      created: new Date().toISOString(),
      data: {
        id: '00000000-0000-4000-8000-000000000000',
        orgId: 'bench',
        title: 'Benchmark post: raw POST loop',
        tags: ['bench'],
        status: 'PUBLISHED',
        publishedAt: new Date().toISOString(),
        author: { id: 'bench-writer', name: 'Bench Writer' },
      },
    });
    const headers = signWebhook({ eventId, rawBody: body, secrets: [secret] });
    const trials: RawLoopTrial[] = [];
    const rawTrial = async () => {
      await receiver.ask({ type: 'reset' });
      const result = await loop.ask<LoopResult>({
        type: 'run',
        origin,
        path: '/raw',
        connections: config.connections,
        durationMs: config.trialMs,
        headers,
        body,
      } satisfies LoopCommand);
      const counted = await receiver.ask<ReceiverStats>({ type: 'stats' });
      trials.push({
        deliveriesPerSec: Math.round((result.requests / result.durationMs) * 1000),
        requests: result.requests,
        receiverCounted: counted.requests,
        errors: result.errors + result.non2xx,
        p50Ms: result.p50Ms,
        p99Ms: result.p99Ms,
      });
      log(
        `  raw POST loop ${trials.length}: ${trials.at(-1)!.deliveriesPerSec} POST/s (${config.connections} connections)`,
      );
    };
    const durableTrials: RawLoopTrial[] = [];
    const wideDurableTrials: RawLoopTrial[] = [];
    const endpoints = config.endpoints ?? 8;
    const endpointCap = config.endpointCap ?? config.connections;
    const durableTrial = async (connections = config.connections, into = durableTrials) => {
      if (!config.databaseUrl) return;
      // The receiver verifies and dedupes every signed body, as it does the dispatchers' deliveries:
      // the same receiver-side work (and CPU, on the same cores) for the baseline and for Herald.
      await receiver.ask({ type: 'reset', secret });
      const machine0 = machineSample();
      const result = await loop.ask<LoopResult>({
        type: 'run',
        origin,
        path: '/durable',
        connections,
        durationMs: config.trialMs,
        headers,
        body,
        durable: {
          databaseUrl: config.databaseUrl,
          schema: `bench_durable_${randomBytes(4).toString('hex')}`,
          secret,
        },
      } satisfies LoopCommand);
      // Includes the loop's set-up and drop of its table (a few ms of a trial of seconds).
      const machine = machineCpuSince(machine0, result.requests);
      const counted = await receiver.ask<ReceiverStats>({ type: 'stats' });
      into.push({
        deliveriesPerSec: Math.round((result.requests / result.durationMs) * 1000),
        requests: result.requests,
        receiverCounted: counted.requests,
        errors: result.errors + result.non2xx,
        p50Ms: result.p50Ms,
        p99Ms: result.p99Ms,
        machine: { usPerDelivery: machine.usPerUnit, busyShare: machine.busyShare },
        verified: counted.verified,
        invalid: counted.invalid + counted.duplicate,
      });
      log(
        `  raw durable loop ${into.length} (${connections} connections): ${into.at(-1)!.deliveriesPerSec} deliveries/s recorded`,
      );
    };
    const only = config.steadyOnly === true;
    const multi = endpoints > 1 && !only;
    const skipped: DispatcherRun = { status: 'skipped', reason: 'steady trial only' };
    // Raw trials before and after the dispatcher's run, so both see about the same background load.
    const before = only ? 0 : Math.ceil(config.trials / 2);
    for (let trial = 0; trial < before; trial++) {
      await rawTrial();
      await durableTrial();
      if (multi) await durableTrial(endpoints * endpointCap, wideDurableTrials);
    }
    // A durable trial right before and right after each of the two single-dispatcher backlog runs
    // (the last one before doubles as the first run's "before", the one between them serves both).
    const lastDurable = () => (before > 0 ? durableTrials.at(-1)?.deliveriesPerSec : undefined);
    const beforeDispatcher = lastDurable();
    const dispatcher = only ? skipped : await runDispatcher(config, receiver, origin, 1);
    if (!only && before > 0) await durableTrial();
    const afterDispatcher = lastDurable();
    // The same run again in new processes, each followed by a durable trial (its "after", the next one's "before").
    const newProcessRepeats: NonNullable<WebhookResult['newProcessRepeats']> = [];
    for (let repeat = 1; repeat < (only ? 1 : (config.newProcessRuns ?? 1)); repeat++) {
      const prior = lastDurable();
      const run = await runDispatcher(config, receiver, origin, 1);
      if (before > 0) await durableTrial();
      newProcessRepeats.push({ run, beside: besideRatio(run.deliveriesPerSec, prior, lastDurable()) });
      log(`  one dispatcher, new process, run ${repeat + 1}: ${run.deliveriesPerSec ?? run.status} deliveries/s`);
    }
    const beforeWarm = lastDurable();
    const warmUpEvents = config.warmUpEvents ?? 5000;
    const warmDispatcher =
      only || warmUpEvents <= 0
        ? null
        : await runDispatcher(config, receiver, origin, 1, 'backlog', 1, config.dispatcherEvents, false, warmUpEvents);
    if (warmDispatcher && before > 0) await durableTrial();
    const afterWarm = warmDispatcher ? lastDurable() : undefined;
    const twoDispatchers =
      config.twoDispatchers === false || only ? null : await runDispatcher(config, receiver, origin, 2);
    // The same backlog to a FIFO endpoint: one POST in flight at a time, in commit order.
    const fifoDispatcher =
      config.fifo === false || only
        ? null
        : await runDispatcher(config, receiver, origin, 1, 'backlog', 1, config.dispatcherEvents, false, 0, 'FIFO');
    // Several endpoints: the same number of deliveries, twice over (events × endpoints).
    const multiEvents = Math.max(1, Math.round((config.dispatcherEvents * 2) / endpoints));
    const multiOne = multi ? await runDispatcher(config, receiver, origin, 1, 'backlog', endpoints, multiEvents) : null;
    const multiTwo =
      multi && config.twoDispatchers !== false
        ? await runDispatcher(config, receiver, origin, 2, 'backlog', endpoints, multiEvents)
        : null;
    const steadyOn = (config.steadyEventsPerSec ?? 1000) > 0;
    const notifyTrial = () =>
      steadyOn && config.steadyCompareNotify
        ? runDispatcher(config, receiver, origin, 1, 'steady', 1, config.dispatcherEvents, true)
        : Promise.resolve(null);
    const notifyFirst = config.steadyCompareNotify === 'first' ? await notifyTrial() : null;
    const steady = steadyOn ? await runDispatcher(config, receiver, origin, 1, 'steady') : null;
    const steadyNotify = config.steadyCompareNotify === 'first' ? notifyFirst : await notifyTrial();
    for (const [label, run] of [
      ['steady', steady],
      ['steady with NOTIFY', steadyNotify],
    ] as const) {
      if (run?.latency) {
        const l = run.latency;
        log(
          `  ${label} ${l.eventsPerSec} events/s (${l.publishedPerSec} achieved): commit → receiver p50 ${l.fromCommit.p50Ms} ms, p99 ${l.fromCommit.p99Ms} ms`,
        );
      } else if (run) log(`  ${label}: ${run.status} ${run.reason ?? ''}`);
    }
    for (let trial = before; trial < (only ? 0 : config.trials); trial++) {
      await rawTrial();
      await durableTrial();
      if (multi) await durableTrial(endpoints * endpointCap, wideDurableTrials);
    }
    const wideDurable =
      wideDurableTrials.length > 0
        ? {
            connections: endpoints * endpointCap,
            trials: wideDurableTrials,
            deliveriesPerSec: spread(wideDurableTrials.map((trial) => trial.deliveriesPerSec)),
          }
        : null;
    const multiEndpoint: MultiEndpointResult | null =
      multi && multiOne
        ? {
            endpoints,
            deliveries: multiEvents * endpoints,
            durableLoop: wideDurable,
            dispatcher: multiOne,
            twoDispatchers: multiTwo,
            durableRatio:
              multiOne.deliveriesPerSec !== undefined && wideDurable
                ? round(multiOne.deliveriesPerSec / wideDurable.deliveriesPerSec.median, 3)
                : null,
            twoOverOne:
              multiTwo?.deliveriesPerSec !== undefined && multiOne.deliveriesPerSec
                ? round(multiTwo.deliveriesPerSec / multiOne.deliveriesPerSec, 3)
                : null,
            ...warmRatios(multiOne, multiTwo, wideDurable?.deliveriesPerSec.median),
          }
        : null;
    if (multiEndpoint)
      log(
        `  ${endpoints} endpoints: one dispatcher ${multiOne?.deliveriesPerSec ?? '–'}/s (${multiEndpoint.durableRatio ?? '–'}× raw durable at ${endpoints * endpointCap} connections), two ${multiTwo?.deliveriesPerSec ?? '–'}/s (${multiEndpoint.twoOverOne ?? '–'}× one)`,
      );
    const rawLoop = {
      connections: config.connections,
      trials,
      deliveriesPerSec: spread(trials.map((trial) => trial.deliveriesPerSec)),
    };
    const durableLoop =
      durableTrials.length > 0
        ? {
            connections: config.connections,
            trials: durableTrials,
            deliveriesPerSec: spread(durableTrials.map((trial) => trial.deliveriesPerSec)),
          }
        : null;
    const schedulerPass =
      config.databaseUrl && !only
        ? await measureSchedulerPass(config.databaseUrl, config.pendingRetries ?? 100_000).catch((error: unknown) => {
            log(`  scheduler pass: failed (${(error as Error).message})`);
            return null;
          })
        : null;
    if (schedulerPass)
      log(`  scheduler pass with ${schedulerPass.pendingRetries} pending retries: ${schedulerPass.passMs.median} ms`);

    if (dispatcher.status === 'ok' || dispatcher.status === 'incomplete') {
      log(
        `  dispatcher: ${dispatcher.deliveriesPerSec} signed deliveries/s (${dispatcher.verified}/${dispatcher.events})`,
      );
    } else {
      log(`  dispatcher: ${dispatcher.status}${dispatcher.reason ? ` (${dispatcher.reason})` : ''}`);
    }
    return {
      receiver:
        'node:http in its own process, 200 as soon as the body has arrived; verifies signatures and dedupes after answering',
      dispatchers: config.dispatcherBuild ? 'image' : 'source',
      rawLoop,
      durableLoop,
      dispatcher,
      newProcessRepeats,
      warmDispatcher,
      warmUpEvents,
      warmDispatcherDurableRatio:
        warmDispatcher?.deliveriesPerSec !== undefined && durableLoop
          ? round(warmDispatcher.deliveriesPerSec / durableLoop.deliveriesPerSec.median, 3)
          : null,
      beside: {
        dispatcher: besideRatio(dispatcher.deliveriesPerSec, beforeDispatcher, afterDispatcher),
        warm: besideRatio(warmDispatcher?.deliveriesPerSec, beforeWarm, afterWarm),
      },
      twoDispatchers,
      fifoDispatcher,
      steady,
      steadyNotify,
      ratio:
        dispatcher.deliveriesPerSec !== undefined
          ? round(dispatcher.deliveriesPerSec / rawLoop.deliveriesPerSec.median, 3)
          : null,
      durableRatio:
        dispatcher.deliveriesPerSec !== undefined && durableLoop
          ? round(dispatcher.deliveriesPerSec / durableLoop.deliveriesPerSec.median, 3)
          : null,
      twoOverOne:
        twoDispatchers?.deliveriesPerSec !== undefined && dispatcher.deliveriesPerSec
          ? round(twoDispatchers.deliveriesPerSec / dispatcher.deliveriesPerSec, 3)
          : null,
      ...warmRatios(dispatcher, twoDispatchers, durableLoop?.deliveriesPerSec.median),
      multiEndpoint,
      schedulerPass,
    };
  } finally {
    await Promise.all([stopChild(receiver.child), stopChild(loop.child)]);
  }
}

/** One dispatcher's warm rate over the raw durable loop's, and two dispatchers' warm rate over one's. */
export function warmRatios(
  one: DispatcherRun,
  two: DispatcherRun | null,
  durableMedian: number | undefined,
): { warmDurableRatio: number | null; warmTwoOverOne: number | null } {
  const oneRate = one.warm?.deliveriesPerSec;
  const twoRate = two?.warm?.deliveriesPerSec;
  return {
    warmDurableRatio: oneRate && durableMedian ? round(oneRate / durableMedian, 3) : null,
    warmTwoOverOne: oneRate && twoRate ? round(twoRate / oneRate, 3) : null,
  };
}
