import type { z } from 'zod';

/** Thrown by {@link parseEnv}; `lines` holds one line per bad variable, each starting with its name. */
export class InvalidConfigError extends Error {
  override readonly name = 'InvalidConfigError';
  constructor(readonly lines: string[]) {
    super(lines.join('\n'));
  }
}

/**
 * Validates the environment against `schema`. Empty strings count as unset, so `FOO=` falls back to
 * the default like an absent `FOO` does.
 * @throws InvalidConfigError naming every variable that is wrong and why
 */
export function parseEnv<T extends z.ZodType>(schema: T, env: Record<string, string | undefined>): z.output<T> {
  const cleaned = Object.fromEntries(Object.entries(env).filter(([, value]) => value !== undefined && value !== ''));
  const result = schema.safeParse(cleaned);
  if (result.success) return result.data;
  const lines = result.error.issues.map((issue) => {
    const variable = issue.path.length > 0 ? issue.path.join('.') : 'environment';
    return `${variable}: ${issue.message}`;
  });
  throw new InvalidConfigError([...new Set(lines)]);
}
