import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { openDb } from '../../src/engine/store/db.js';
import { ContainerRepository } from '../../src/engine/store/containers.js';
import { ImageRepository } from '../../src/engine/store/images.js';
import { scratchDir } from '../harness/tmp.js';

// Lists of an empty table answer without a query (store/presence.ts): what they
// answer must follow every insert and deletion, a failed insert included.
describe('store: lists of empty tables', () => {
  const image = (n: number) => ({
    image: { id: `sha256:${String(n).repeat(64)}`, parent: '', config: '{}', size: 1, created: '', added_at: n },
    layers: [],
    blobs: [],
    tags: [`t${n}:latest`],
    repoDigests: [],
  });
  const container = (n: number, img: string) => ({
    id: String(n).repeat(64),
    name: `/c${n}`,
    image_id: img,
    image_ref: 'busybox',
    config: '{}',
    host_config: '{}',
    created: n,
    recursive_ro_binds: 0,
  });

  it('containers and images listed after each insert and removal', () => {
    const db = openDb(path.join(scratchDir('berth-presence-'), 'berth.db'));
    const images = new ImageRepository(db);
    const containers = new ContainerRepository(db);
    expect(images.list()).toEqual([]);
    expect(containers.list()).toEqual([]);

    images.add(image(1));
    expect(images.list().map((r) => r.id)).toEqual([image(1).image.id]);
    const img = image(1).image.id;
    containers.insert(container(1, img));
    expect(containers.list().map((r) => r.name)).toEqual(['/c1']);
    expect(containers.withStatusNewestFirst(['created']).map((r) => r.name)).toEqual(['/c1']);

    containers.remove(container(1, img).id);
    expect(containers.list()).toEqual([]);
    expect(containers.withStatus(['created'])).toEqual([]);
    // A name taken: the insert fails, the list stays right.
    containers.insert(container(2, img));
    expect(() => containers.insert({ ...container(3, img), name: '/c2' })).toThrow();
    expect(containers.list().map((r) => r.name)).toEqual(['/c2']);
    containers.remove(container(2, img).id);
    expect(containers.list()).toEqual([]);

    images.deleteImage(img);
    expect(images.list()).toEqual([]);
    images.add(image(2));
    expect(images.list().map((r) => r.id)).toEqual([image(2).image.id]);
    db.close();
  });

  it('a store opened on recorded rows lists them', () => {
    const file = path.join(scratchDir('berth-presence-'), 'berth.db');
    const first = openDb(file);
    new ImageRepository(first).add(image(1));
    new ContainerRepository(first).insert(container(1, image(1).image.id));
    first.close();
    const db = openDb(file);
    expect(new ImageRepository(db).list()).toHaveLength(1);
    expect(new ContainerRepository(db).list()).toHaveLength(1);
    db.close();
  });
});
