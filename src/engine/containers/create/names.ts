// Container names: dockerd's rules, and generated adjective_noun names.
import { randomInt } from 'node:crypto';
import { invalidParameter } from '../../../errors.js';

const VALID = /^\/?[a-zA-Z0-9][a-zA-Z0-9_.-]+$/;

/** Validates a user-given name and strips its leading '/'. */
export function checkName(name: string): string {
  if (!VALID.test(name)) {
    throw invalidParameter(`Invalid container name (${name}), only [a-zA-Z0-9][a-zA-Z0-9_.-] are allowed`);
  }
  return name.replace(/^\//, '');
}

// Our own word lists: moods and things found at a harbour.
const ADJECTIVES = [
  'amber',
  'brave',
  'calm',
  'clever',
  'crisp',
  'daring',
  'eager',
  'fancy',
  'gentle',
  'happy',
  'hardy',
  'jolly',
  'keen',
  'lively',
  'lucky',
  'mellow',
  'merry',
  'nimble',
  'patient',
  'plucky',
  'quiet',
  'rapid',
  'salty',
  'sharp',
  'silent',
  'steady',
  'sturdy',
  'swift',
  'tidy',
  'vivid',
  'wary',
  'witty',
  'zesty',
  'bold',
  'bright',
  'cheery',
  'dapper',
  'frosty',
  'proud',
  'sunny',
];
const NOUNS = [
  'anchor',
  'barge',
  'beacon',
  'bollard',
  'buoy',
  'cable',
  'capstan',
  'cargo',
  'crane',
  'dinghy',
  'dock',
  'ferry',
  'galley',
  'gangway',
  'harbour',
  'hatch',
  'hull',
  'jetty',
  'keel',
  'ketch',
  'lantern',
  'mast',
  'mooring',
  'oar',
  'pier',
  'pilot',
  'quay',
  'rudder',
  'sail',
  'schooner',
  'skiff',
  'slipway',
  'sloop',
  'tug',
  'wharf',
  'winch',
  'yawl',
  'compass',
  'tide',
  'lighthouse',
];

export function generateName(taken: (name: string) => boolean): string {
  for (let i = 0; ; i++) {
    const base = `${ADJECTIVES[randomInt(ADJECTIVES.length)]}_${NOUNS[randomInt(NOUNS.length)]}`;
    const name = i < 10 ? base : `${base}${randomInt(10)}`;
    if (!taken(name)) return name;
  }
}
