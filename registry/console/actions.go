package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"slices"

	"github.com/muster-io/muster/model"
)

// What an operator can do. Every write handler authorizes the write itself,
// whatever the page showed, and takes only a JSON body: a form of another
// site cannot send one without the browser asking the console first (a CORS
// preflight, which it never grants).

// maxBody bounds a write's body.
const maxBody = 64 << 10

// readJSON decodes the body of a write into v; on failure it answers the
// request and returns false.
func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		writeError(w, http.StatusUnsupportedMediaType, errors.New("console: a write takes a JSON body (Content-Type: application/json)"))
		return false
	}
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		writeError(w, http.StatusForbidden, fmt.Errorf("console: a write from another site (Sec-Fetch-Site %s) is refused", site))
		return false
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("console: the body: %w", err))
		return false
	}
	if _, err := dec.Token(); err != io.EOF {
		writeError(w, http.StatusBadRequest, errors.New("console: the body: more than one JSON value"))
		return false
	}
	return true
}

type patchRequest struct {
	Instance model.InstanceKey `json:"instance"`
	Weight   *float64          `json:"weight"`
	Enabled  *bool             `json:"enabled"`
}

func (c *Console) apiPatch(w http.ResponseWriter, r *http.Request) {
	var req patchRequest
	if !readJSON(w, r, &req) {
		return
	}
	key := req.Instance.WithDefaults()
	if _, ok := c.authorize(w, r, key.Service.Namespace, true); !ok {
		return
	}
	if req.Weight == nil && req.Enabled == nil {
		writeError(w, http.StatusBadRequest, errors.New("console: a patch sets weight, enabled or both"))
		return
	}
	if req.Weight != nil && (math.IsNaN(*req.Weight) || *req.Weight < 0 || *req.Weight > 10000) {
		writeError(w, http.StatusBadRequest, fmt.Errorf("weight %v: must be 0–10000", *req.Weight))
		return
	}
	err := c.eng.patch(r.Context(), model.InstancePatch{Key: key, Weight: req.Weight, Enabled: req.Enabled})
	c.answerWrite(w, r, "patch", key.String(), err)
}

type keyRequest struct {
	Instance model.InstanceKey `json:"instance"`
}

// readKeyWrite reads a write's body naming one instance, authorizes the
// write to its namespace and validates the key; on failure it answers the
// request and returns false.
func (c *Console) readKeyWrite(w http.ResponseWriter, r *http.Request) (model.InstanceKey, bool) {
	var req keyRequest
	if !readJSON(w, r, &req) {
		return model.InstanceKey{}, false
	}
	key := req.Instance.WithDefaults()
	if _, ok := c.authorize(w, r, key.Service.Namespace, true); !ok {
		return key, false
	}
	if err := key.Validate(); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return key, false
	}
	return key, true
}

func (c *Console) apiUnpatch(w http.ResponseWriter, r *http.Request) {
	key, ok := c.readKeyWrite(w, r)
	if !ok {
		return
	}
	c.answerWrite(w, r, "unpatch", key.String(), c.eng.removePatch(r.Context(), key))
}

func (c *Console) apiDeregister(w http.ResponseWriter, r *http.Request) {
	key, ok := c.readKeyWrite(w, r)
	if !ok {
		return
	}
	def, err := c.eng.definition(r.Context(), key.Service)
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	if def.Ephemeral {
		writeError(w, http.StatusBadRequest, errors.New("console: only persistent instances are deregistered here; an ephemeral one belongs to its client"))
		return
	}
	c.answerWrite(w, r, "deregister", key.String(), c.eng.deregister(r.Context(), key))
}

type serviceRequest struct {
	Service          model.ServiceKey `json:"service"`
	ProtectThreshold *float64         `json:"protectThreshold"`
	Clusters         []clusterRequest `json:"clusters"`
}

type clusterRequest struct {
	Name        string            `json:"name"`
	HealthCheck model.HealthCheck `json:"healthCheck"`
	// Password, when set, replaces the MySQL check's password; nil keeps
	// the stored one (the console never shows it).
	Password *string `json:"password"`
}

func (c *Console) apiUpdateService(w http.ResponseWriter, r *http.Request) {
	var req serviceRequest
	if !readJSON(w, r, &req) {
		return
	}
	key := req.Service.WithDefaults()
	if _, ok := c.authorize(w, r, key.Namespace, true); !ok {
		return
	}
	if err := key.Validate(); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	def, err := c.eng.definition(r.Context(), key)
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	if def.Ephemeral {
		writeError(w, http.StatusBadRequest, errors.New("console: only a persistent service's threshold and checks are edited here"))
		return
	}
	def = def.Clone()
	if req.ProtectThreshold != nil {
		def.ProtectThreshold = *req.ProtectThreshold
	}
	for _, cr := range req.Clusters {
		i := slices.IndexFunc(def.Clusters, func(cl model.Cluster) bool { return cl.Name == cr.Name })
		if i < 0 {
			def.Clusters = append(def.Clusters, model.Cluster{Name: cr.Name})
			i = len(def.Clusters) - 1
		}
		hc := cr.HealthCheck
		hc.Password = def.Clusters[i].HealthCheck.Password
		if cr.Password != nil {
			hc.Password = *cr.Password
		}
		if hc.Headers.IsZero() {
			hc.Headers = def.Clusters[i].HealthCheck.Headers
		}
		def.Clusters[i].HealthCheck = hc
	}
	c.answerWrite(w, r, "update service", key.String(), c.eng.updateService(r.Context(), def))
}

// answerWrite answers a write and logs it with the user who made it.
func (c *Console) answerWrite(w http.ResponseWriter, r *http.Request, what, target string, err error) {
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	c.log.Info("console: write", "op", what, "target", target, "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, map[string]string{"ok": what})
}

type compareRequest struct {
	From string `json:"from"`
	Peer string `json:"peer"`
}

func (c *Console) apiCompare(w http.ResponseWriter, r *http.Request) {
	var req compareRequest
	if !readJSON(w, r, &req) {
		return
	}
	if _, ok := c.authorize(w, r, "", false); !ok {
		return
	}
	if req.From == "" || req.Peer == "" || req.From == req.Peer {
		writeError(w, http.StatusBadRequest, errors.New("console: a consistency check compares two different nodes (from, peer)"))
		return
	}
	res, err := c.eng.compare(r.Context(), req.From, req.Peer)
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	var buf bytes.Buffer
	if err := c.pages.ExecuteTemplate(&buf, "compare", res); err != nil {
		writeError(w, http.StatusInternalServerError, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"result": res, "html": buf.String()})
}
