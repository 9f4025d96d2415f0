// Engine errors in unit tests.
import { expect } from 'vitest';
import { isEngineError } from '../../src/errors.js';

/** Runs `fn`, which must refuse its input (an `invalid` engine error); its message. */
export function refusal(fn: () => unknown): string {
  try {
    fn();
  } catch (e) {
    expect(isEngineError(e, 'invalid')).toBe(true);
    return (e as Error).message;
  }
  throw new Error('expected a refusal');
}
