// A client of berthd written against the official Go SDK (Debian's
// golang-github-docker-docker-dev), built by test/clients/go-sdk.test.ts in
// GOPATH mode. Each subcommand runs one user-level sequence through the SDK and
// prints what it observed as one JSON object; any SDK error exits non-zero.
//
//	client foreground IMAGE CMD...   create, start, wait, logs (stdcopy)
//	client background IMAGE NAME     create, start, list, logs, stop, list all
//	client pull REF                  pull (progress stream to its end), image list
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
)

func main() {
	if len(os.Args) < 3 {
		fail(fmt.Errorf("usage: client foreground|background|pull ARGS"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	check(err)
	defer cli.Close()
	// Negotiation happens on the first request; ping so the version is known up front.
	_, err = cli.Ping(ctx)
	check(err)

	out := map[string]interface{}{"apiVersion": cli.ClientVersion()}
	switch os.Args[1] {
	case "foreground":
		foreground(ctx, cli, os.Args[2], os.Args[3:], out)
	case "background":
		background(ctx, cli, os.Args[2], os.Args[3], out)
	case "pull":
		pull(ctx, cli, os.Args[2], out)
	default:
		fail(fmt.Errorf("unknown subcommand %q", os.Args[1]))
	}
	check(json.NewEncoder(os.Stdout).Encode(out))
}

func foreground(ctx context.Context, cli *client.Client, image string, cmd []string, out map[string]interface{}) {
	created, err := cli.ContainerCreate(ctx, &container.Config{Image: image, Cmd: cmd}, nil, nil, nil, "")
	check(err)
	out["id"] = created.ID
	out["warnings"] = created.Warnings
	// As `docker run` does: wait for the next exit before starting, so the exit cannot be missed.
	waitC, errC := cli.ContainerWait(ctx, created.ID, container.WaitConditionNextExit)
	check(cli.ContainerStart(ctx, created.ID, types.ContainerStartOptions{}))
	select {
	case res := <-waitC:
		out["statusCode"] = res.StatusCode
	case err := <-errC:
		fail(err)
	}
	stdout, stderr := logs(ctx, cli, created.ID)
	out["stdout"] = stdout
	out["stderr"] = stderr
}

func background(ctx context.Context, cli *client.Client, image, name string, out map[string]interface{}) {
	cmd := []string{"sh", "-c", `echo started; trap "echo bye; exit 0" TERM; while true; do sleep 0.1; done`}
	created, err := cli.ContainerCreate(ctx, &container.Config{Image: image, Cmd: cmd}, nil, nil, nil, name)
	check(err)
	out["id"] = created.ID
	check(cli.ContainerStart(ctx, created.ID, types.ContainerStartOptions{}))

	running, err := cli.ContainerList(ctx, types.ContainerListOptions{})
	check(err)
	for _, c := range running {
		if c.ID == created.ID {
			out["listed"] = map[string]interface{}{"names": c.Names, "image": c.Image, "state": c.State, "status": c.Status}
		}
	}

	// The logs can be read while it runs: wait for its first line.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if stdout, _ := logs(ctx, cli, created.ID); strings.Contains(stdout, "started") || time.Now().After(deadline) {
			break
		}
	}
	timeout := 5 * time.Second
	check(cli.ContainerStop(ctx, created.ID, &timeout))
	out["stdout"], _ = logs(ctx, cli, created.ID)

	stillRunning, err := cli.ContainerList(ctx, types.ContainerListOptions{Filters: filters.NewArgs(filters.Arg("id", created.ID))})
	check(err)
	out["runningAfterStop"] = len(stillRunning)
	all, err := cli.ContainerList(ctx, types.ContainerListOptions{All: true, Filters: filters.NewArgs(filters.Arg("id", created.ID))})
	check(err)
	for _, c := range all {
		out["listedAfterStop"] = map[string]interface{}{"state": c.State, "status": c.Status}
	}
	inspect, err := cli.ContainerInspect(ctx, created.ID)
	check(err)
	out["exitCode"] = inspect.State.ExitCode
	check(cli.ContainerRemove(ctx, created.ID, types.ContainerRemoveOptions{}))
}

func pull(ctx context.Context, cli *client.Client, ref string, out map[string]interface{}) {
	rc, err := cli.ImagePull(ctx, ref, types.ImagePullOptions{})
	check(err)
	var statuses []string
	scanner := bufio.NewScanner(rc)
	for scanner.Scan() {
		var msg struct {
			Status string `json:"status"`
			Error  string `json:"error"`
		}
		check(json.Unmarshal(scanner.Bytes(), &msg))
		if msg.Error != "" {
			fail(fmt.Errorf("pull: %s", msg.Error))
		}
		statuses = append(statuses, msg.Status)
	}
	check(scanner.Err())
	check(rc.Close())
	out["statuses"] = statuses
	images, err := cli.ImageList(ctx, types.ImageListOptions{})
	check(err)
	var tags []string
	for _, img := range images {
		tags = append(tags, img.RepoTags...)
	}
	out["repoTags"] = tags
}

// logs reads a container's whole log, split by stdcopy as the SDK's users do.
func logs(ctx context.Context, cli *client.Client, id string) (string, string) {
	rc, err := cli.ContainerLogs(ctx, id, types.ContainerLogsOptions{ShowStdout: true, ShowStderr: true})
	check(err)
	defer rc.Close()
	var stdout, stderr bytes.Buffer
	_, err = stdcopy.StdCopy(&stdout, &stderr, rc)
	if err != nil && err != io.EOF {
		fail(err)
	}
	return stdout.String(), stderr.String()
}

func check(err error) {
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "error:", err)
	os.Exit(1)
}
