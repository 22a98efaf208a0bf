package server

import (
	"fmt"
	"net/http"
	"time"

	"github.com/portside-io/portside/internal/localcloud/store"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

func (s *Server) createVolume(w http.ResponseWriter, r *http.Request) {
	var req api.CreateVolumeRequest
	if err := decode(w, r, &req); err != nil {
		respond(w, r, 0, nil, err)
		return
	}
	lim := s.limits()
	if err := validName("volume name", req.Name, lim.VolumeNameLen); err != nil {
		respond(w, r, 0, nil, err)
		return
	}
	if len(req.Zones) == 0 {
		respond(w, r, 0, nil, invalid("zones is empty: a volume lives in at least one zone"))
		return
	}
	if req.SizeGiB < 1 || req.SizeGiB > 65536 {
		respond(w, r, 0, nil, invalid("sizeGiB %d is out of range 1-65536", req.SizeGiB))
		return
	}
	vol := api.Volume{Name: req.Name, Zones: req.Zones, SizeGiB: req.SizeGiB, CreatedAt: time.Now().UTC()}
	for _, z := range req.Zones {
		region, err := s.regionOf(z)
		if err != nil {
			respond(w, r, 0, nil, err)
			return
		}
		if vol.Region != "" && vol.Region != region {
			respond(w, r, 0, nil, invalid("zones %v span regions %s and %s: a volume lives in one region", req.Zones, vol.Region, region))
			return
		}
		vol.Region = region
	}
	err := s.store.Update(func(tx *store.Tx) error {
		if tx.Exists(store.Meta, "volume-name/"+req.Name) {
			return conflict("a volume named %q already exists", req.Name)
		}
		if err := checkCount(tx, store.Volumes, "volumes", lim.Volumes); err != nil {
			return err
		}
		seq, err := tx.NextID(store.Volumes)
		if err != nil {
			return err
		}
		vol.ID = fmt.Sprintf("vol-%08x", seq)
		if err := tx.Put(store.Meta, "volume-name/"+req.Name, vol.ID); err != nil {
			return err
		}
		return tx.Put(store.Volumes, vol.ID, vol)
	})
	respond(w, r, http.StatusCreated, vol, err)
}

func (s *Server) listVolumes(w http.ResponseWriter, r *http.Request) {
	var out []api.Volume
	err := s.store.View(func(tx *store.Tx) (err error) {
		out, err = store.List[api.Volume](tx, store.Volumes)
		return err
	})
	if out == nil {
		out = []api.Volume{}
	}
	respond(w, r, http.StatusOK, out, err)
}

func (s *Server) getVolume(w http.ResponseWriter, r *http.Request) {
	var vol api.Volume
	err := s.store.View(func(tx *store.Tx) error {
		var ok bool
		var err error
		vol, ok, err = store.Get[api.Volume](tx, store.Volumes, r.PathValue("id"))
		if err == nil && !ok {
			return notFound("volume %q not found", r.PathValue("id"))
		}
		return err
	})
	respond(w, r, http.StatusOK, vol, err)
}

func (s *Server) deleteVolume(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	err := s.store.Update(func(tx *store.Tx) error {
		vol, ok, err := store.Get[api.Volume](tx, store.Volumes, id)
		if err != nil {
			return err
		}
		if !ok {
			return notFound("volume %q not found", id)
		}
		if err := tx.Delete(store.Meta, "volume-name/"+vol.Name); err != nil {
			return err
		}
		return tx.Delete(store.Volumes, id)
	})
	respond(w, r, 0, nil, err)
}
