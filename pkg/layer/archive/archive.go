// Package archive writes the image archives adapt hands to `docker load`:
// image configs derived from a base image's, and a docker-archive that
// carries them with the one layer adapt adds. The layers below are named,
// not copied: Docker's load finds them by chain ID.
package archive

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/pkg/layer/engine"
)

// Config is an image's config JSON in Docker's format (what `docker
// save` writes as <id>.json; its sha256 is the image ID).
type Config struct {
	Architecture string         `json:"architecture"`
	OS           string         `json:"os"`
	Variant      string         `json:"variant,omitempty"`
	Created      string         `json:"created,omitempty"`
	Config       map[string]any `json:"config"`
	RootFS       RootFS         `json:"rootfs"`
	History      []History      `json:"history,omitempty"`
}

// RootFS lists an image's layers by diff ID, bottom first.
type RootFS struct {
	Type    string   `json:"type"`
	DiffIDs []string `json:"diff_ids"`
}

// History is one step of an image's history, oldest first.
type History struct {
	Created    string `json:"created,omitempty"`
	CreatedBy  string `json:"created_by,omitempty"`
	Comment    string `json:"comment,omitempty"`
	EmptyLayer bool   `json:"empty_layer,omitempty"`
}

// ModTime is the modification time of every file adapt puts in a layer or
// an archive: fixed, so that the same inputs make the same layer digest and
// image ID on any machine (a checkout does not preserve mtimes); not the
// epoch, which zip and some build tools reject as "before 1980".
var ModTime = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

// Image is one image of an archive: its tag, config JSON and ID.
type Image struct {
	Tag    string
	Config []byte
	ID     string // "sha256:" + hex of Config
	Layers []string
}

// NewImage encodes c and names the image by its digest, as the engine will.
func NewImage(tag string, c Config) (Image, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return Image{}, fmt.Errorf("image config for %s: %w", tag, err)
	}
	sum := sha256.Sum256(b)
	return Image{Tag: tag, Config: b, ID: "sha256:" + hex.EncodeToString(sum[:]), Layers: c.RootFS.DiffIDs}, nil
}

// Derive makes the config of an image over lower's layers plus
// layerDiff (when not ""), whose container config is config: base's (the
// task's own image, whose facts the daemon gets) as the serving settings
// change it. created is base's creation time, so that the same inputs give
// the same image ID on every run.
func Derive(base, lower *engine.Image, history []History, layerDiff string, config map[string]any, createdBy string) Config {
	layers := append([]string{}, lower.Layers...)
	h := append([]History{}, history...)
	if layerDiff != "" {
		layers = append(layers, layerDiff)
		if h != nil {
			h = append(h, History{Created: base.Created, CreatedBy: createdBy})
		}
	} else if h != nil {
		h = append(h, History{Created: base.Created, CreatedBy: createdBy, EmptyLayer: true})
	}
	return Config{
		Architecture: base.Architecture,
		OS:           base.OS,
		Variant:      base.Variant,
		Created:      base.Created,
		Config:       config,
		RootFS:       RootFS{Type: "layers", DiffIDs: layers},
		History:      h,
	}
}

// RebuildHistory turns `docker history` (newest first, sizes only) back into
// config history entries for an image of nLayers layers. The CLI does not say
// which entries made a layer; an entry with a size did, and so, when the
// counts demand it, did a sizeless one that is not a #(nop) metadata step
// (a RUN that changed nothing still commits a layer). When the counts cannot
// be matched the history is left out (nil): Docker accepts an image without
// one, but not one whose history claims more layers than it has.
func RebuildHistory(hs []engine.HistoryEntry, nLayers int) []History {
	out := make([]History, len(hs))
	sized := 0
	for i, e := range hs {
		out[len(hs)-1-i] = History{Created: e.Created, CreatedBy: e.CreatedBy, Comment: e.Comment, EmptyLayer: e.Size == 0}
		if e.Size > 0 {
			sized++
		}
	}
	need := nLayers - sized
	for i := range out {
		if need == 0 {
			break
		}
		if out[i].EmptyLayer && !strings.Contains(out[i].CreatedBy, "#(nop)") {
			out[i].EmptyLayer = false
			need--
		}
	}
	if need != 0 {
		return nil
	}
	return out
}

// Write writes a docker-archive with the images and the one layer
// they add (layerTar, whose diff ID is layerDiff). The layers below it are
// named in each image's manifest entry but not carried: Docker's load finds
// them by chain ID and never opens their files.
func Write(w io.Writer, images []Image, layerTar, layerDiff string) error {
	tw := tar.NewWriter(w)
	type entry struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	layerPath := func(diff string) string { return strings.TrimPrefix(diff, "sha256:") + "/layer.tar" }
	var manifest []entry
	for _, d := range images {
		e := entry{Config: strings.TrimPrefix(d.ID, "sha256:") + ".json", RepoTags: []string{d.Tag}}
		for _, l := range d.Layers {
			e.Layers = append(e.Layers, layerPath(l))
		}
		manifest = append(manifest, e)
		if err := writeTarFile(tw, e.Config, d.Config); err != nil {
			return err
		}
	}
	if layerDiff != "" {
		f, err := os.Open(layerTar)
		if err != nil {
			return fmt.Errorf("image archive: %w", err)
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return fmt.Errorf("image archive: %w", err)
		}
		dir := strings.TrimSuffix(layerPath(layerDiff), "/layer.tar")
		if err := tw.WriteHeader(&tar.Header{Name: dir + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: ModTime}); err != nil {
			return fmt.Errorf("image archive: %w", err)
		}
		if err := tw.WriteHeader(&tar.Header{Name: layerPath(layerDiff), Typeflag: tar.TypeReg, Mode: 0o644, Size: st.Size(), ModTime: ModTime}); err != nil {
			return fmt.Errorf("image archive: %w", err)
		}
		if _, err := io.Copy(tw, f); err != nil {
			return fmt.Errorf("image archive: %w", err)
		}
	}
	mb, err := json.Marshal(manifest)
	if err != nil {
		return fmt.Errorf("image archive manifest: %w", err)
	}
	if err := writeTarFile(tw, "manifest.json", mb); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("image archive: %w", err)
	}
	return nil
}

func writeTarFile(tw *tar.Writer, name string, data []byte) error {
	if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(data)), ModTime: ModTime}); err != nil {
		return fmt.Errorf("image archive %s: %w", name, err)
	}
	if _, err := tw.Write(data); err != nil {
		return fmt.Errorf("image archive %s: %w", name, err)
	}
	return nil
}
