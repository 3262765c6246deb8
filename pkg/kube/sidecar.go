package kube

import (
	"fmt"
	"sort"
	"strings"

	"github.com/sandboxd/sandboxd/pkg/layer/compose"
	"github.com/sandboxd/sandboxd/pkg/task"
)

// sidecarKeys are the compose service keys a Pod container carries (by
// translation) or needs not (ignored: a Pod starts sidecars first and names
// them by hostAliases). Any other key has no Pod equivalent adapt can write
// faithfully, and the task is refused rather than run with it dropped.
var sidecarKeys = map[string]bool{
	"image": true, "build": true, "environment": true, "command": true, "entrypoint": true,
	"working_dir": true, "expose": true, "ports": true,
	"depends_on": false, "restart": false, "container_name": false, "hostname": false, "pull_policy": false,
}

// composeSidecars turns the task's compose sidecars into native sidecars
// (init containers that restart always: they start before serve, and a Job
// completes when serve exits whatever they do), and returns their names
// for hostAliases.
func composeSidecars(t *task.Task, images map[string]string, sshPort int) ([]container, []string, error) {
	// As adapt read it: interpolated as Compose would under Harbor.
	f, err := compose.ForTask(t)
	if err != nil {
		return nil, nil, err
	}
	path := t.ComposeFile
	ports := map[int]string{sshPort: "sandboxd's SSH"}
	var out []container
	var names []string
	for _, s := range f.Sidecars {
		var bad []string
		for k := range s.Raw {
			if _, ok := sidecarKeys[k]; !ok {
				bad = append(bad, k)
			}
		}
		if len(bad) > 0 {
			sort.Strings(bad)
			return nil, nil, fmt.Errorf("%s: service %s sets %s, which adapt --k8s cannot carry into a Pod container: remove it, or write the Pod by hand", path, s.Name, strings.Join(bad, ", "))
		}
		if other, dup := ports[s.Port]; dup {
			return nil, nil, fmt.Errorf("%s: service %s listens on port %d like %s: containers of one Pod share its network, so give it another port", path, s.Name, s.Port, other)
		}
		ports[s.Port] = "service " + s.Name
		image := s.Image
		if s.Build != nil {
			image = images[s.Name]
		}
		if image == "" {
			return nil, nil, fmt.Errorf("%s: service %s: adapt recorded no image for it", path, s.Name)
		}
		c := container{Name: s.Name, Image: image, RestartPolicy: "Always",
			Ports: []port{{ContainerPort: s.Port, Protocol: "TCP"}}}
		// compose's entrypoint replaces the image's ENTRYPOINT (a Pod's
		// command), its command the CMD (a Pod's args).
		if c.Command, err = argv(s.Raw["entrypoint"]); err != nil {
			return nil, nil, fmt.Errorf("%s: service %s: entrypoint %w", path, s.Name, err)
		}
		if c.Args, err = argv(s.Raw["command"]); err != nil {
			return nil, nil, fmt.Errorf("%s: service %s: command %w", path, s.Name, err)
		}
		if wd, ok := s.Raw["working_dir"].(string); ok {
			c.WorkingDir = wd
		}
		for _, kv := range s.Env {
			k, v, _ := strings.Cut(kv, "=")
			c.Env = append(c.Env, envVar{Name: k, Value: v})
		}
		out = append(out, c)
		names = append(names, s.Name)
	}
	return out, names, nil
}

// argv is a compose command or entrypoint as a list. compose splits a
// string as a shell would; one without quotes or escapes splits on
// blanks the same way, any other is refused rather than guessed.
func argv(v any) ([]string, error) {
	switch x := v.(type) {
	case nil:
		return nil, nil
	case string:
		if strings.ContainsAny(x, "'\"\\$`") {
			return nil, fmt.Errorf("%q is a string with quotes or escapes: write it as a list", x)
		}
		return strings.Fields(x), nil
	case []any:
		out := make([]string, 0, len(x))
		for _, a := range x {
			s, ok := a.(string)
			if !ok {
				return nil, fmt.Errorf("has %v, which is not a string", a)
			}
			out = append(out, s)
		}
		return out, nil
	}
	return nil, fmt.Errorf("is neither a string nor a list")
}
