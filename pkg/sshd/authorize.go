package sshd

import (
	"errors"
	"fmt"
)

// AuthorizeAgentKeys adds agent keys to a running server, for a sandbox
// started before its trial's agent was known (a warm pool's Pod): the keys
// that serve started with stay, and connections already open are not
// touched. data is authorized_keys lines; if any line is refused (a bad
// key, an option sandboxd cannot honour, a harness key, which must never
// get a shell), none is added. It returns the keys added and those that
// were agent keys already.
func (s *Server) AuthorizeAgentKeys(data []byte) (added, had []AuthorizedKey, err error) {
	if s.cfg.Agent == nil {
		return nil, nil, errors.New("this server has no agent sessions to authorize keys for")
	}
	keys, refused := ParseAuthorizedKeys(data)
	if len(refused) > 0 {
		return nil, nil, fmt.Errorf("no key added: %w", errors.Join(refused...))
	}
	if len(keys) == 0 {
		return nil, nil, errors.New("no key given: pass public keys in OpenSSH authorized_keys format (the line of a .pub file)")
	}
	s.keysMu.Lock()
	defer s.keysMu.Unlock()
	for _, k := range keys {
		if id, ok := s.keys[string(k.Key.Marshal())]; ok && id.harness {
			return nil, nil, fmt.Errorf("no key added: key %s is a harness key, and a harness key must never get a shell", k.Fingerprint())
		}
	}
	for _, k := range keys {
		m := string(k.Key.Marshal())
		if _, ok := s.keys[m]; ok {
			had = append(had, k)
			continue
		}
		s.keys[m] = &identity{key: k}
		added = append(added, k)
	}
	return added, had, nil
}

// identityOf is the identity of an accepted key; keys may be added while
// connections authenticate.
func (s *Server) identityOf(marshaled string) (*identity, bool) {
	s.keysMu.RLock()
	defer s.keysMu.RUnlock()
	id, ok := s.keys[marshaled]
	return id, ok
}
