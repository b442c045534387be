from rest_framework.routers import SimpleRouter

from console.topics.api.views import TopicViewSet

router = SimpleRouter()
router.register("topics", TopicViewSet, basename="topic")
urlpatterns = router.urls
