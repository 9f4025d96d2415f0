// Test images for TypeScript tests. The builder and the push client live in
// fixtures/images.mjs (plain JavaScript, so fixtures/seed-registry.mjs can run
// it on bare Node for the quickstart); fixtures/images.d.mts types it.
//
//   const reg = await startRegistry({ auth: 'token' });
//   const image = await busyboxImage();
//   await pushImage(reg, 'busybox', 'latest', image);  // creds: reg's first user
//
// See fixtures/images.d.mts for every signature.
export * from '../../fixtures/images.mjs';
